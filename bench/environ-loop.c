// Baseline for the scan benchmark: the cheapest honest walk over /proc/*/environ.
// One readdir of /proc, then for every numeric entry open(2) / read(2) until EOF / close(2) of
// /proc/<pid>/environ into one reused buffer, and a whole-record search for ENTRY (NAME=1).
// With MODE "stat" it also reads /proc/<pid>/stat first, as tether's snapshot does.
//
//   environ-loop REPS ENTRY [environ|stat]
//
// Prints one line per pass: "<ms> <files read> <environ bytes> <matches>" (CLOCK_MONOTONIC).
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *buf;
static size_t cap = 64 * 1024;

// Reads the whole file into buf; returns its length, or -1 when it cannot be opened/read.
static long read_all(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
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

// Same rule as sessionEntriesIn(): ENTRY as one whole NUL-delimited record.
static int has_entry(const char *b, size_t len, const char *entry, size_t elen) {
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

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s REPS ENTRY [environ|stat]\n", argv[0]);
    return 2;
  }
  int reps = atoi(argv[1]);
  const char *entry = argv[2];
  size_t elen = strlen(entry);
  int with_stat = argc > 3 && strcmp(argv[3], "stat") == 0;
  buf = malloc(cap);
  if (!buf) return 1;
  char path[300];
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    long files = 0, bytes = 0, matches = 0;
    DIR *d = opendir("/proc");
    if (!d) return 1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      if (with_stat) {
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (read_all(path) < 0) continue;
      }
      snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
      long n = read_all(path);
      if (n < 0) continue;
      files++;
      bytes += n;
      if (has_entry(buf, (size_t)n, entry, elen)) matches++;
    }
    closedir(d);
    double t1 = now_ms();
    printf("%.4f %ld %ld %ld\n", t1 - t0, files, bytes, matches);
  }
  return 0;
}
