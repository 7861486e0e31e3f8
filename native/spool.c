// The file operations of the ledger's spool writer (src/ledger/spool.ts), of its checks before
// the payload (src/ledger/sqlite-file.ts) and of the supervisor's host ids it records
// (src/ledger/supervisor.ts), in C: `tether run` makes them once each in a
// fresh process, where each Node fs function's first call costs more than the system calls
// behind it (decisions.md D20, docs/benchmarks.md §9). Each function does what its JS
// counterpart does, system call for system call; src/proc/native.ts binds them (`nativeFiles`)
// and the JS path stays for a machine without this library.
//
// Every function returns 0 or more on success, or -errno with `*stage` saying which call failed
// (tether.h TP_SPOOL_STAGE_*), which the caller turns into the error Node would have thrown for
// that call.
//
// Built with native/scan.c into one shared library by scripts/build-native.mjs.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The stages and results src/proc/native-files.ts reads (TP_SPOOL_*), and the tp_* declarations
// these definitions are held to.
#include "tether.h"

/**
 * The first `n` bytes of the file at `path` into `buf`, as checkLedgerFile's common case reads
 * them: opened O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY (writable, not a symlink, a FIFO never
 * blocks, a terminal never made this process's controlling one), fstat(2) to see a regular file,
 * pread(2) at offset 0. Returns the bytes read (fewer than `n`: the file is shorter),
 * TP_SPOOL_NOT_REGULAR, or -errno.
 */
long tp_head(const char *path, uint8_t *buf, long n, int32_t *stage) {
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    *stage = TP_SPOOL_STAGE_OPEN;
    return -errno;
  }
  struct stat st;
  long result;
  if (fstat(fd, &st) < 0) {
    *stage = TP_SPOOL_STAGE_OPEN;
    result = -errno;
  } else if (!S_ISREG(st.st_mode)) {
    result = TP_SPOOL_NOT_REGULAR;
  } else {
    result = 0;
    while (result < n) {
      ssize_t got = pread(fd, buf + result, (size_t)(n - result), result);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        *stage = TP_SPOOL_STAGE_READ;
        result = -errno;
        break;
      }
      if (got == 0) break;
      result += got;
    }
  }
  close(fd);
  return result;
}

// Whether `path` names something, as Node's existsSync asks: access(2), F_OK.
static int exists(const char *path) { return access(path, F_OK) == 0; }

/**
 * checkSqliteAddon's search (src/ledger/sqlite-file.ts `packageRoot`, `addonPlaces`): from
 * `start` up to `/`, the first `<dir>/node_modules/<pkg>` holding a package.json is the
 * package's root, copied to `root` (NUL-terminated, `cap` bytes); then its `places` (`count`
 * paths relative to the root, each NUL-terminated, one after the other) in order. Returns 1 when
 * one of them exists (the addon is built), 0 when none does, -1 when no root was found, -2 when
 * `start` is empty or relative past PATH_MAX, or the root does not fit `root`. A path built on the way that does not fit
 * names nothing, as existsSync says of it (ENAMETOOLONG): the walk goes on up.
 */
int tp_find_addon(const char *start, const char *pkg, const char *places, int count, char *root, long cap) {
  char dir[4096], path[4096];
  size_t len = strlen(start);
  if (len == 0) return -2;
  if (len >= sizeof dir) {
    // Every directory this long names nothing below it that fits PATH_MAX: start from the
    // longest ancestor that fits.
    size_t cut = sizeof dir - 1;
    while (cut > 0 && start[cut] != '/') cut--;
    if (start[0] != '/') return -2;
    len = cut == 0 ? 1 : cut;
  }
  memcpy(dir, start, len);
  dir[len] = '\0';
  for (;;) {
    int n = snprintf(path, sizeof path, "%s%snode_modules/%s/package.json", dir,
                     dir[len - 1] == '/' ? "" : "/", pkg);
    // A path past PATH_MAX names nothing (existsSync: ENAMETOOLONG is false): look further up.
    if (n >= 0 && (size_t)n < sizeof path && exists(path)) break;
    if (len == 1) return -1; // at "/"
    // dirname(dir): cut at its last '/', keeping "/" itself.
    char *slash = strrchr(dir, '/');
    if (slash == NULL) return -1;
    len = slash == dir ? 1 : (size_t)(slash - dir);
    dir[len] = '\0';
  }
  int n = snprintf(root, (size_t)cap, "%s%snode_modules/%s", dir, dir[len - 1] == '/' ? "" : "/", pkg);
  if (n < 0 || n >= cap) return -2;
  const char *place = places;
  for (int i = 0; i < count; i++, place += strlen(place) + 1) {
    int m = snprintf(path, sizeof path, "%s/%s", root, place);
    if (m >= 0 && (size_t)m < sizeof path && exists(path)) return 1; // past PATH_MAX: not there
  }
  return 0;
}

/**
 * makeSpoolDir's calls (src/ledger/spool.ts): lstat(2) of `dir`; when absent, mkdir(2) mode
 * 0700 (EEXIST: made meanwhile) and lstat again. Returns 1 when `dir` is a directory (not a
 * symlink to one), 0 when something else is there, or -errno (TP_SPOOL_STAGE_LSTAT,
 * TP_SPOOL_STAGE_MKDIR).
 */
int tp_spool_dir(const char *dir, int32_t *stage) {
  struct stat st;
  if (lstat(dir, &st) < 0) {
    if (errno != ENOENT) {
      *stage = TP_SPOOL_STAGE_LSTAT;
      return -errno;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
      *stage = TP_SPOOL_STAGE_MKDIR;
      return -errno;
    }
    if (lstat(dir, &st) < 0) {
      *stage = TP_SPOOL_STAGE_LSTAT;
      return -errno;
    }
  }
  return S_ISDIR(st.st_mode) ? 1 : 0;
}

/**
 * A spooled record put in place, as SpoolStore writes one (src/ledger/spool.ts `writeNew`, then
 * a link or a rename): the `len` bytes of `data` written to a new file `tmp` (O_CREAT | O_EXCL,
 * mode 0600; a short write is continued until every byte is written or a write fails), closed,
 * then `how` 0: linked to `name` (EEXIST: the name is taken) and `tmp` removed; `how` 1: renamed
 * over `name`. On any failure `tmp` is removed: no partial record is left under a spool name.
 * Returns 0, or -errno (TP_SPOOL_STAGE_OPEN, TP_SPOOL_STAGE_WRITE, TP_SPOOL_STAGE_LINK,
 * TP_SPOOL_STAGE_RENAME).
 */
int tp_spool_put(const char *tmp, const char *name, const uint8_t *data, long len, int how, int32_t *stage) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *stage = TP_SPOOL_STAGE_OPEN;
    return -errno;
  }
  for (long off = 0; off < len;) {
    ssize_t n = write(fd, data + off, (size_t)(len - off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : ENOSPC;
      close(fd);
      unlink(tmp);
      *stage = TP_SPOOL_STAGE_WRITE;
      return -e;
    }
    off += n;
  }
  if (close(fd) < 0 && errno != EINTR) {
    int e = errno;
    unlink(tmp);
    *stage = TP_SPOOL_STAGE_WRITE;
    return -e;
  }
  if (how == 0) {
    int r = link(tmp, name) < 0 ? -errno : 0;
    unlink(tmp);
    if (r < 0) *stage = TP_SPOOL_STAGE_LINK;
    return r;
  }
  if (rename(tmp, name) < 0) {
    int e = errno;
    unlink(tmp);
    *stage = TP_SPOOL_STAGE_RENAME;
    return -e;
  }
  return 0;
}

// The trimmed text of the small file `path` (at most `cap` - 1 bytes: the rest is not read) into
// `out`, NUL-terminated; its length, or -1 when it cannot be read.
static long trimmed(const char *path, char *out, long cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  long len = 0;
  while (len < cap - 1) {
    ssize_t n = read(fd, out + len, (size_t)(cap - 1 - len));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    len += n;
  }
  close(fd);
  long at = 0;
  while (at < len && (out[at] == ' ' || (out[at] >= '\t' && out[at] <= '\r'))) at++;
  while (len > at && (out[len - 1] == ' ' || (out[len - 1] >= '\t' && out[len - 1] <= '\r'))) len--;
  memmove(out, out + at, (size_t)(len - at));
  out[len - at] = '\0';
  return len - at;
}

static int is_machine_id(const char *s, long len) {
  if (len != 32) return 0;
  for (long i = 0; i < len; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/**
 * The supervisor's host, as src/ledger/supervisor.ts reads it: the machine id (machine-id(5):
 * the first of /etc/machine-id and /var/lib/dbus/machine-id that holds 32 lowercase hex digits,
 * trimmed) into machine[33], '' when none; the boot id (/proc/sys/kernel/random/boot_id,
 * trimmed) into boot[`boot_cap`], '' when unread; the inode of /proc/self/ns/pid into *ns_ino,
 * -1 when it cannot be looked at. Returns 0.
 */
int tp_host(char *machine, char *boot, long boot_cap, double *ns_ino) {
  static const char *const machine_files[] = {"/etc/machine-id", "/var/lib/dbus/machine-id"};
  char text[4096];
  machine[0] = '\0';
  for (int i = 0; i < 2; i++) {
    long n = trimmed(machine_files[i], text, sizeof text);
    if (n >= 0 && is_machine_id(text, n)) {
      memcpy(machine, text, 33);
      break;
    }
  }
  if (trimmed("/proc/sys/kernel/random/boot_id", boot, boot_cap) < 0) boot[0] = '\0';
  struct stat st;
  *ns_ino = stat("/proc/self/ns/pid", &st) == 0 ? (double)st.st_ino : -1;
  return 0;
}
