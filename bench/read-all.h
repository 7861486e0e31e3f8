// The file reads the C references of the benchmarks share (environ-loop.c, floor.c,
// guard-loop.c): a whole file into one reused buffer that grows as needed (unlike tether's fixed
// 64 KiB one: a reference reads everything), and the whole-record match of a session entry.
// `buf` is allocated by the including program's main: `buf = malloc(cap)`.
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *buf;
static size_t cap = 64 * 1024;

// Reads the whole file at `path` (relative to `dirfd`, or AT_FDCWD) into buf; returns its
// length, or -1 when it cannot be opened or read.
static inline long read_at(int dirfd, const char *path) {
  int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (!buf) abort();
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  close(fd);
  return (long)len;
}

static inline long read_all(const char *path) { return read_at(AT_FDCWD, path); }

// Same rule as sessionEntriesIn() (src/proc/environ.ts): ENTRY as one whole NUL-delimited record.
static inline int has_entry(const char *b, size_t len, const char *entry, size_t elen) {
  const char *p = b, *end = b + len;
  while (p < end) {
    const char *at = memmem(p, (size_t)(end - p), entry, elen);
    if (!at) return 0;
    int starts = at == b || at[-1] == 0;
    int ends = at + elen == end || at[elen] == 0;
    if (starts && ends) return 1;
    p = at + 1;
  }
  return 0;
}
