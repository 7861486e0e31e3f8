// The /proc reads of a scan in C, loaded through koffi by src/proc/native.ts: the same reads,
// in the same order and with the same rules, as the JS path of src/proc/ (snapshot.ts,
// environ.ts, details.ts, stat.ts), but one call per walk instead of three or four crossings
// per file. Every file is read through the caller's buffer (`buf`, READ_BUFFER_BYTES = 64 KiB:
// the JS path's shared buffer), never a larger one: no file grows memory.
//
// Outcomes per file: a process gone (ENOENT, ESRCH) or denied (EACCES, EPERM) is an answer;
// any other errno (EMFILE, EIO…) stops the call with -1 and `info` = {errno, stage, pid, tid}
// (stage: STAGE_*), which the caller throws as the JS path would have.
//
// Built as a shared library by scripts/build-native.mjs (dist/native/linux-<arch>/).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tether.h" // every constant and tp_* function the TS side uses

#define ENVIRON_TIME_BUDGET_NS (TP_ENVIRON_TIME_BUDGET_MS * 1000L * 1000)
#define TAG_PREFIX_LEN ((long)sizeof TP_TAG_PREFIX - 1)
#define TAG_RECORD_LEN (TAG_PREFIX_LEN + TP_TAG_HEX_DIGITS + 2) // TETHER_SESSION_<32 hex>=1
#define HEX TP_TAG_HEX_DIGITS

// The last call's failure, for the caller to throw.
static void fail(int32_t *info, int err, int stage, int pid, int tid) {
  info[TP_INFO_ERRNO] = err;
  info[TP_INFO_STAGE] = stage;
  info[TP_INFO_PID] = pid;
  info[TP_INFO_TID] = tid;
}

static int is_gone(int err) { return err == ENOENT || err == ESRCH; }
static int is_denied(int err) { return err == EACCES || err == EPERM; }

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// readInto (src/proc/read.ts): at most `limit` bytes of dirfd/path into buf, one byte more to
// tell truncation. Returns KIND_*, or -1 (errno in *err) for any other failure; *len and
// *truncated on TP_KIND_OK.
//
// `until`: READ_TO_END reads until read(2) returns 0. READ_SHORT_ENDS takes a read shorter than
// asked for the end, and does not make the read of the end: a procfs `cmdline` or `environ`
// read copies from the process's memory until the buffer is full or the area ends (fs/proc/
// base.c loops page by page), so a short read is its end — or a page it could not read, which
// a read of the end would not get either (it returns 0 there). READ_LINE, for `stat`, also
// wants the short read to end in '\n': procfs prints the line whole into its seq_file buffer and
// copies it out from the start, and a read that ends in '\n' partway cannot pass for a whole
// stat line (the only '\n' after the last ')' ends the line, and the comm before it holds at most
// 15 bytes, too few for the fields parse_stat needs).
enum { READ_TO_END = 0, READ_SHORT_ENDS, READ_LINE };
static int read_file(int dirfd, const char *path, uint8_t *buf, long limit, int until, long *len,
                     int *truncated, int *err, int *stage) {
  long want = (limit < TP_READ_BUFFER_BYTES - 1 ? limit : TP_READ_BUFFER_BYTES - 1) + 1;
  int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (is_gone(errno)) return TP_KIND_GONE;
    if (is_denied(errno)) return TP_KIND_DENIED;
    *err = errno;
    *stage = TP_STAGE_OPEN;
    return -1;
  }
  long got = 0;
  while (got < want) {
    ssize_t n = read(fd, buf + got, (size_t)(want - got));
    if (n < 0) {
      int e = errno;
      close(fd);
      if (is_gone(e)) return TP_KIND_GONE;
      if (is_denied(e)) return TP_KIND_DENIED;
      *err = e;
      *stage = TP_STAGE_READ;
      return -1;
    }
    if (n == 0) break;
    got += n;
    if (until != READ_TO_END && got < want && (until == READ_SHORT_ENDS || buf[got - 1] == '\n')) break;
  }
  close(fd);
  *truncated = got == want;
  *len = got == want ? want - 1 : got;
  return TP_KIND_OK;
}

static int read_into(int dirfd, const char *path, uint8_t *buf, long limit, long *len, int *truncated,
                     int *err, int *stage) {
  return read_file(dirfd, path, buf, limit, READ_TO_END, len, truncated, err, stage);
}

// `<pid>/stat` (or a task's) into buf, whole: read_file, READ_LINE.
static int read_stat(int dirfd, const char *path, uint8_t *buf, long *len, int *err, int *stage) {
  int truncated;
  return read_file(dirfd, path, buf, TP_READ_BUFFER_BYTES - 1, READ_LINE, len, &truncated, err, stage);
}

// `<pid>/cmdline`, at most `limit` bytes (and one more to tell truncation): read_file, READ_SHORT_ENDS.
static int read_cmdline(int dirfd, const char *path, uint8_t *buf, long limit, long *len, int *truncated,
                        int *err, int *stage) {
  return read_file(dirfd, path, buf, limit, READ_SHORT_ENDS, len, truncated, err, stage);
}

// parseStatBuffer (src/proc/stat.ts), byte for byte: cut at the last ')', fields counted from
// the state; 0 when the bytes are not a stat line.
#define F_PPID 1
#define F_PGID 2
#define F_SID 3
#define F_FLAGS 6
#define F_THREADS 17
#define F_START 19
struct stat_line {
  double pid, fields[F_START + 1];
  long comm_at, comm_len;
  uint8_t state;
};

static int parse_stat(const uint8_t *b, long len, struct stat_line *s) {
  const uint8_t *open = memchr(b, '(', (size_t)len);
  const uint8_t *last = len > 0 ? memrchr(b, ')', (size_t)len) : NULL;
  long close = last != NULL ? last - b : -1;
  // (JS searches the whole buffer for '(': one found only past `len` fails `close < open` there.)
  if (open == NULL) return 0;
  long o = open - b;
  if (o <= 0 || close < o || close + 2 >= len) return 0;
  double pid = 0;
  for (long i = 0; i < o - 1; i++) pid = pid * 10 + (double)b[i] - 48;
  memset(s->fields, 0, sizeof s->fields);
  int field = 0;
  double value = 0;
  int negative = 0;
  for (long i = close + 3; i < len && field <= F_START; i++) {
    uint8_t c = b[i];
    if (c == ' ') {
      s->fields[field] = negative ? -value : value;
      field++;
      value = 0;
      negative = 0;
    } else if (c == '-') {
      negative = 1;
    } else if (c >= '0' && c <= '9') {
      value = value * 10 + c - '0';
    }
  }
  if (field <= F_START) return 0;
  s->pid = pid;
  s->state = b[close + 2];
  s->comm_at = o + 1;
  s->comm_len = close - o - 1;
  return 1;
}

// One snapshot record (tether.h TP_STAT_*), padded to a multiple of 8 bytes. Host byte order.

static long put_stat(uint8_t *out, long at, long cap, const uint8_t *b, const struct stat_line *s) {
  long need = (TP_STAT_RECORD_HEAD + s->comm_len + 7) & ~7L; // each record 8-byte aligned (a Float64Array view)
  if (at + need > cap) return -1;
  double v[8] = {s->pid,
                 s->fields[F_PPID],
                 s->fields[F_PGID],
                 s->fields[F_SID],
                 s->fields[F_FLAGS],
                 s->fields[F_THREADS],
                 s->fields[F_START],
                 (double)s->state};
  memcpy(out + at, v, sizeof v);
  uint16_t cl = (uint16_t)s->comm_len;
  memcpy(out + at + TP_STAT_COMM_LENGTH_AT, &cl, 2);
  memcpy(out + at + TP_STAT_RECORD_HEAD, b + s->comm_at, (size_t)s->comm_len);
  return at + need;
}

// "<pid><suffix>" into path (at least 12 + strlen(suffix) bytes): snprintf's "%d%s", without
// its cost on a path opened per process.
static void pid_path(char *path, int pid, const char *suffix) {
  char digits[12];
  int n = 0;
  unsigned v = (unsigned)pid;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (int i = 0; i < n; i++) path[i] = digits[n - 1 - i];
  strcpy(path + n, suffix);
}

static int open_root(const char *root) { return open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

/**
 * An O_DIRECTORY fd of `root`, for the caller to keep and pass as `rootfd` to every call below
 * (each call then opens its files relative to it: no open of the root, no path walk from /);
 * -errno when it cannot be opened. With rootfd -1 a call opens `root` itself.
 */
int tp_open_root(const char *root) {
  int fd = open_root(root);
  return fd < 0 ? -errno : fd;
}

// The directory fd a call works in: `rootfd` (the caller's) or `root` opened now (*own: close it).
static int root_of(const char *root, int rootfd, int *own) {
  *own = rootfd < 0;
  return rootfd >= 0 ? rootfd : open_root(root);
}
static void root_done(int dfd, int own) {
  if (own) close(dfd);
}

/** readStat: one pid's stat as one snapshot record in out; 0 when gone/unparsable; -1 (info). */
long tp_stat(const char *root, int rootfd, int pid, uint8_t *buf, uint8_t *out, long cap, int32_t *info) {
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    if (is_gone(errno)) return 0;
    fail(info, errno, TP_STAGE_ROOT, pid, 0);
    return -1;
  }
  char path[64];
  snprintf(path, sizeof path, "%d/stat", pid);
  long len;
  int err, stage;
  int k = read_stat(dfd, path, buf, &len, &err, &stage);
  root_done(dfd, own);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    return -1;
  }
  struct stat_line s;
  if (k != TP_KIND_OK || !parse_stat(buf, len, &s)) return 0;
  long at = put_stat(out, 0, cap, buf, &s);
  return at < 0 ? -2 : at;
}

// A record of buf[from, to) is a session entry: exactly TETHER_SESSION_<32 lowercase hex>=1.
static int is_entry(const uint8_t *r, long n) {
  if (n != TAG_RECORD_LEN || memcmp(r, TP_TAG_PREFIX, TAG_PREFIX_LEN) != 0) return 0;
  for (int i = TAG_PREFIX_LEN; i < TAG_PREFIX_LEN + HEX; i++) {
    uint8_t c = r[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return r[n - 2] == '=' && r[n - 1] == '1';
}

// Output of one environ read: kind, oversized, bytes (float64), entry count, then each entry's
// 32 hex digits. Entries are written at out[*at…]; the head is filled at the end.
// With `want` (32 hex digits), nothing is stored: `found` says whether that entry was among them.
struct env_out {
  uint8_t *out;
  long cap, at, head, count;
  int full;
  const uint8_t *want;
  int found;
};

static void collect(struct env_out *o, const uint8_t *b, long from, long to) {
  // Each record of [from, to) ends at a NUL or at `to`; only one that starts with the prefix can
  // be an entry: memmem finds those (as the C loop's search), rather than a test of every byte.
  long at = from;
  while (at < to) {
    const uint8_t *hit = memmem(b + at, (size_t)(to - at), TP_TAG_PREFIX, TAG_PREFIX_LEN);
    if (hit == NULL) return;
    long start = hit - b;
    const uint8_t *nul = memchr(hit, 0, (size_t)(to - start));
    long end = nul != NULL ? nul - b : to;
    if ((start == from || b[start - 1] == 0) && is_entry(b + start, end - start)) {
      if (o->want != NULL) {
        if (memcmp(b + start + TAG_PREFIX_LEN, o->want, HEX) == 0) o->found = 1;
      } else {
        if (o->at + HEX > o->cap) {
          o->full = 1;
          return;
        }
        memcpy(o->out + o->at, b + start + TAG_PREFIX_LEN, HEX);
        o->at += HEX;
      }
      o->count++;
    }
    at = end + 1;
  }
}

// streamEntries (src/proc/environ.ts): the same read(2) sizes, carry and skip rules, budgets
// checked after each chunk; once one is reached, a read of one more byte decides (end of file:
// read whole; a byte: oversized). A read shorter than asked is the end (READ_SHORT_ENDS), where
// the JS path reads once more to see 0. Returns KIND_* (entries in `o`), or -1 (*err, *stage).
static int stream_entries(int dirfd, const char *path, int64_t deadline, uint8_t *buf, struct env_out *o,
                          double *bytes_out, int *oversized, int *err, int *stage) {
  int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (is_gone(errno)) return TP_KIND_GONE;
    if (is_denied(errno)) return TP_KIND_DENIED;
    *err = errno;
    *stage = TP_STAGE_OPEN;
    return -1;
  }
  long carry = 0, bytes = 0;
  int skipping = 0;
  *oversized = 0;
  for (;;) {
    long asked = TP_READ_BUFFER_BYTES - carry;
    ssize_t n = read(fd, buf + carry, (size_t)asked);
    if (n < 0) {
      int e = errno;
      close(fd);
      if (is_gone(e)) return TP_KIND_GONE;
      if (is_denied(e)) return TP_KIND_DENIED;
      *err = e;
      *stage = TP_STAGE_READ;
      return -1;
    }
    long end = carry + n;
    if (n == 0) {
      if (!skipping && end > 0) collect(o, buf, 0, end); // the last record needs no NUL
      break;
    }
    bytes += n;
    long from = 0;
    if (skipping) {
      uint8_t *nul = memchr(buf, 0, (size_t)end);
      if (nul) {
        from = nul - buf + 1;
        skipping = 0;
      } else {
        from = end;
      }
    }
    long tail = from;
    if (from < end) {
      long nul = -1;
      for (long i = end - 1; i >= from; i--) {
        if (buf[i] == 0) {
          nul = i;
          break;
        }
      }
      if (nul >= from) {
        collect(o, buf, from, nul); // records ending at each NUL up to the last one
        tail = nul + 1;
      }
      if (end - tail > TAG_RECORD_LEN) skipping = 1;
    }
    if (skipping || tail == end) {
      carry = 0;
    } else {
      memmove(buf, buf + tail, (size_t)(end - tail));
      carry = end - tail;
    }
    if (n < asked) {
      // A read shorter than asked is the environ's end (read_file, READ_SHORT_ENDS): read whole.
      if (!skipping && carry > 0) collect(o, buf, 0, carry);
      break;
    }
    if (bytes > TP_ENVIRON_BYTE_BUDGET || now_ns() >= deadline) {
      // A budget is reached: one more byte decides. None: the end, the environ read whole.
      ssize_t more = read(fd, buf + carry, 1);
      if (more < 0) {
        int e = errno;
        close(fd);
        if (is_gone(e)) return TP_KIND_GONE;
        if (is_denied(e)) return TP_KIND_DENIED;
        *err = e;
        *stage = TP_STAGE_READ;
        return -1;
      }
      if (more == 0) {
        if (!skipping && carry > 0) collect(o, buf, 0, carry);
      } else {
        bytes += 1;
        *oversized = 1;
      }
      break;
    }
  }
  close(fd);
  *bytes_out = (double)bytes;
  return TP_KIND_OK;
}

// An empty result (no entry, nothing read) in `o` from `first` on.
static void env_reset(struct env_out *o, long first) {
  o->at = first;
  o->count = 0;
  o->found = 0;
}

// readEnviron (src/proc/environ.ts) of one pid, with its own deadline `budget_ns` from now
// (ENVIRON_TIME_BUDGET_NS but for a test): its environ, or —
// for a leader that has exited (`leader_exited`: stat state Z) and an empty first read — its
// threads' task/<tid>/environ. The entries go to `o` from o->at on (o->full when they do not
// fit); *kind, *bytes, *oversized as the JS result. Returns 0, or -1 (info).
static int environ_one(int dfd, int pid, int leader_exited, int64_t budget_ns, uint8_t *buf, struct env_out *o,
                       int *kind, double *bytes_out, int *over_out, int32_t *info) {
  long first = o->at;
  env_reset(o, first);
  o->full = 0;
  char path[96];
  int64_t deadline = now_ns() + budget_ns;
  double bytes = 0;
  int oversized = 0, err = 0, stage = 0;
  pid_path(path, pid, "/environ");
  int k = stream_entries(dfd, path, deadline, buf, o, &bytes, &oversized, &err, &stage);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    return -1;
  }
  if (leader_exited && !(k == TP_KIND_OK && bytes > 0) && !o->full) {
    int saw_denied = k == TP_KIND_DENIED, saw_ok = k == TP_KIND_OK, found = 0;
    snprintf(path, sizeof path, "%d/task", pid);
    int tfd = openat(dfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *td = tfd >= 0 ? fdopendir(tfd) : NULL;
    if (tfd >= 0 && !td) close(tfd);
    struct dirent *e;
    while (td && (e = readdir(td)) != NULL) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      int tid = atoi(e->d_name);
      if (tid == pid) continue;
      env_reset(o, first);
      double tb = 0;
      int tover = 0;
      snprintf(path, sizeof path, "%d/task/%d/environ", pid, tid);
      int r = stream_entries(dfd, path, deadline, buf, o, &tb, &tover, &err, &stage);
      if (r < 0) {
        fail(info, err, stage, pid, tid);
        closedir(td);
        return -1;
      }
      if (r == TP_KIND_DENIED) saw_denied = 1;
      if (r != TP_KIND_OK) continue;
      saw_ok = 1;
      if (tb > 0) {
        k = TP_KIND_OK;
        bytes = tb;
        oversized = tover;
        found = 1;
        break;
      }
    }
    if (td) closedir(td);
    if (!found) {
      env_reset(o, first);
      bytes = 0;
      oversized = 0;
      k = saw_denied ? TP_KIND_DENIED : saw_ok ? TP_KIND_OK : TP_KIND_GONE;
    }
  }
  if (k != TP_KIND_OK && !o->full) {
    env_reset(o, first);
    bytes = 0;
    oversized = 0;
  }
  *kind = k;
  *bytes_out = bytes;
  *over_out = oversized;
  return 0;
}

/**
 * readEnviron for pids[0, n) (environ_one each: leader_exited[i] for pids[i], each with a time
 * budget of `budget_ms` milliseconds: ENVIRON_TIME_BUDGET_MS but for a test). Records into
 * out: u8 kind, u8 oversized, f64 bytes, u32 entry count, count × 32 hex digits. Returns the
 * bytes written with info[TP_INFO_FILE] = pids done (fewer than n when out is full: call again for the
 * rest; -2 when not even one fits), or -1 (info).
 */
long tp_environ(const struct tp_proc *p, const struct tp_environ_args *a) {
  const char *root = p->root;
  int rootfd = p->rootfd, n = a->n;
  uint8_t *buf = p->buf, *out = a->out;
  int32_t *info = p->info;
  const int32_t *pids = a->pids;
  const uint8_t *leader_exited = a->leader_exited;
  long cap = a->cap;
  double budget_ms = a->budget_ms;
  info[TP_INFO_FILE] = 0; // the pids done
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    fail(info, errno, TP_STAGE_ROOT, 0, 0);
    return -1;
  }
  if (n > 0 && cap < TP_ENV_HEAD) {
    root_done(dfd, own);
    return TP_NO_ROOM;
  }
  struct env_out o = {out, cap, 0, 0, 0, 0, NULL, 0};
  int i;
  for (i = 0; i < n; i++) {
    long start = o.at;
    if (start + TP_ENV_HEAD > cap) break;
    o.head = start;
    o.at = start + TP_ENV_HEAD;
    int k, oversized;
    double bytes;
    if (environ_one(dfd, pids[i], leader_exited[i], (int64_t)(budget_ms * 1e6), buf, &o, &k, &bytes, &oversized,
                    info) < 0) {
      root_done(dfd, own);
      return -1;
    }
    if (o.full) {
      o.at = start;
      break;
    }
    out[start + TP_ENV_KIND_AT] = (uint8_t)k;
    out[start + TP_ENV_OVERSIZED_AT] = (uint8_t)oversized;
    memcpy(out + start + TP_ENV_BYTES_AT, &bytes, 8);
    uint32_t c = (uint32_t)o.count;
    memcpy(out + start + TP_ENV_COUNT_AT, &c, 4);
  }
  root_done(dfd, own);
  info[TP_INFO_FILE] = i;
  if (i == 0 && n > 0) return TP_NO_ROOM;
  return o.at;
}

// The real uid from the `Uid:` line of the first 4 KiB of <pid>/status into *uid (-1 when gone,
// denied or without one). Returns 0, or -1 (info; info[TP_INFO_FILE] = TP_FILE_STATUS).
static int status_uid(int dfd, int pid, uint8_t *buf, double *uid, int32_t *info) {
  char path[64];
  long len;
  int truncated, err, stage;
  *uid = -1;
  snprintf(path, sizeof path, "%d/status", pid);
  int k = read_into(dfd, path, buf, TP_STATUS_READ_BYTES, &len, &truncated, &err, &stage);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    info[TP_INFO_FILE] = TP_FILE_STATUS; // the file that failed: 1 status, 2 cmdline
    return -1;
  }
  if (k != TP_KIND_OK) return 0;
  // /^Uid:\s+(\d+)/m on latin1 text: \s is \t \n \v \f \r, space and U+00A0.
  for (long i = 0; i + 4 <= len; i++) {
    if ((i > 0 && buf[i - 1] != '\n' && buf[i - 1] != '\r') || memcmp(buf + i, "Uid:", 4) != 0) continue;
    long j = i + 4, ws = j;
    while (j < len && (buf[j] == ' ' || (buf[j] >= 9 && buf[j] <= 13) || buf[j] == 0xa0)) j++;
    if (j == ws || j >= len || buf[j] < '0' || buf[j] > '9') continue;
    double v = 0;
    while (j < len && buf[j] >= '0' && buf[j] <= '9') v = v * 10 + buf[j++] - '0';
    *uid = v;
    break;
  }
  return 0;
}

// <pid>/cmdline, at most `limit` bytes, into buf[0, out[2]) (out[1]: KIND_*, out[3]: truncated).
// Returns 0, or -1 (info; info[TP_INFO_FILE] = TP_FILE_CMDLINE).
static int cmdline_into(int dfd, int pid, long limit, uint8_t *buf, double *out, int32_t *info) {
  char path[64];
  long len;
  int truncated, err, stage;
  out[TP_DETAILS_KIND] = TP_KIND_GONE;
  out[TP_DETAILS_CMDLINE_LENGTH] = 0;
  out[TP_DETAILS_TRUNCATED] = 0;
  snprintf(path, sizeof path, "%d/cmdline", pid);
  int k = read_cmdline(dfd, path, buf, limit, &len, &truncated, &err, &stage);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    info[TP_INFO_FILE] = TP_FILE_CMDLINE;
    return -1;
  }
  out[TP_DETAILS_KIND] = k;
  if (k == TP_KIND_OK) {
    out[TP_DETAILS_CMDLINE_LENGTH] = (double)len;
    out[TP_DETAILS_TRUNCATED] = truncated;
  }
  return 0;
}

/**
 * The details of one found process (src/proc/details.ts): the real uid from the `Uid:` line of
 * the first 4 KiB of status (out[0]; -1 when gone, denied or without one), then cmdline, at
 * most `cmdline_limit` bytes, left in buf[0, out[2]) (out[1]: KIND_*, out[3]: truncated).
 * Returns 0, or -1 (info; info[TP_INFO_FILE] names the file: TP_FILE_*).
 */
int tp_details(const char *root, int rootfd, int pid, long cmdline_limit, uint8_t *buf, double *out,
               int32_t *info) {
  out[TP_DETAILS_UID] = -1;
  out[TP_DETAILS_KIND] = TP_KIND_GONE;
  out[TP_DETAILS_CMDLINE_LENGTH] = 0;
  out[TP_DETAILS_TRUNCATED] = 0;
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    if (is_gone(errno)) return 0;
    fail(info, errno, TP_STAGE_ROOT, pid, 0);
    return -1;
  }
  int r = status_uid(dfd, pid, buf, &out[TP_DETAILS_UID], info);
  if (r == 0) r = cmdline_into(dfd, pid, cmdline_limit, buf, out, info);
  root_done(dfd, own);
  return r;
}

/**
 * readCmdline (src/proc/details.ts) for pids[0, n) in one call: <pid>/cmdline, at most `limit`
 * bytes each (one more read to tell truncation, as read_into), read straight into text[0, cap),
 * one after another. Per pid, rec[TP_CMDLINE_RECORD * i…]: [0] KIND_* (gone: ENOENT/ESRCH,
 * denied: EACCES/EPERM), [1] its offset in `text`, [2] its length, [3] truncated (the file holds
 * more than `limit` bytes). Pid i is started only while limit + 1 bytes are left, so the call may stop early: returns the
 * pids done (call again for the rest with a larger `text`; 0 only when cap < limit + 1), or -1
 * (info: the read that failed, info[TP_INFO_MORE] the pid's index).
 */
long tp_cmdlines(const struct tp_proc *p, const struct tp_cmdlines_args *a) {
  const char *root = p->root;
  int rootfd = p->rootfd, n = a->n;
  int32_t *info = p->info;
  const int32_t *pids = a->pids;
  long limit = a->limit, cap = a->text_cap;
  double *rec = a->rec;
  uint8_t *text = a->text;
  info[TP_INFO_MORE] = 0;
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    fail(info, errno, TP_STAGE_ROOT, n > 0 ? pids[0] : 0, 0);
    return -1;
  }
  long at = 0;
  int i;
  char path[64];
  for (i = 0; i < n && at + limit + 1 <= cap; i++) {
    double *r = rec + (long)TP_CMDLINE_RECORD * i;
    snprintf(path, sizeof path, "%d/cmdline", pids[i]);
    long len = 0;
    int truncated = 0, err, stage;
    int k = read_cmdline(dfd, path, text + at, limit, &len, &truncated, &err, &stage);
    if (k < 0) {
      fail(info, err, stage, pids[i], 0);
      info[TP_INFO_MORE] = i;
      root_done(dfd, own);
      return -1;
    }
    r[TP_CMDLINE_KIND] = k;
    r[TP_CMDLINE_AT] = (double)at;
    r[TP_CMDLINE_LENGTH] = k == TP_KIND_OK ? (double)len : 0;
    r[TP_CMDLINE_TRUNCATED] = k == TP_KIND_OK && truncated;
    if (k == TP_KIND_OK) at += len;
  }
  root_done(dfd, own);
  return i;
}

// pidfd_open(2) and PIDFD_GET_INFO (Linux 6.13, linux/pidfd.h): the first 64 bytes of struct
// pidfd_info (PIDFD_INFO_SIZE_VER0), which every kernel that has the ioctl accepts.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
struct pidfd_info_v0 {
  uint64_t mask, cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid, spare;
};
#define PIDFD_INFO_CREDS (1UL << 1)
#define PIDFD_GET_INFO_V0 _IOWR(0xFF, 11, struct pidfd_info_v0)

// 1 until the ioctl answers ENOTTY or EINVAL (a kernel before 6.13): then status is read.
static int pidfd_info_works = 1;

// The real uid of the process `pidfd` names, as the caller's user namespace sees it (as status
// shows it); -1 when the kernel does not say (an older kernel, the process already reaped).
static double pidfd_ruid(int pidfd) {
  if (!pidfd_info_works) return -1;
  struct pidfd_info_v0 pi;
  memset(&pi, 0, sizeof pi);
  pi.mask = PIDFD_INFO_CREDS;
  if (ioctl(pidfd, PIDFD_GET_INFO_V0, &pi) != 0) {
    if (errno == ENOTTY || errno == EINVAL) pidfd_info_works = 0;
    return -1;
  }
  return (pi.mask & PIDFD_INFO_CREDS) ? (double)pi.ruid : -1;
}

// The fd has not reported an exit: poll(2) with timeout 0, asked again when interrupted. 1 while
// it runs, 0 once readable (the whole thread group has exited), -1 when poll failed (unknown).
static int pidfd_running(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  for (;;) {
    int n = poll(&p, 1, 0);
    if (n >= 0) return p.revents == 0;
    if (errno != EINTR) return -1;
  }
}

/**
 * poll(2) of one fd for POLLIN with timeout 0 (asked again when interrupted): its revents, or
 * -errno. For hasExited (src/sweep/signal.ts) without marshalling a struct per call.
 */
int tp_poll1(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  for (;;) {
    int n = poll(&p, 1, 0);
    if (n >= 0) return p.revents;
    if (errno != EINTR) return -errno;
  }
}

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/**
 * sendHeld's check and signal in one call (src/sweep/signal.ts): poll(2) of the pidfd (timeout
 * 0, asked again when interrupted); when it has reported the exit, 1 (nothing sent: a zombie is
 * not signalled); POLLNVAL: -EBADF (the fd is not open); else pidfd_send_signal(fd, sig): 0
 * sent, or -errno (ESRCH, EPERM…). A failed poll (not EINTR) leaves the exit unknown: the
 * signal is sent.
 */
int tp_send_held(int fd, int sig) {
  int revents = tp_poll1(fd);
  if (revents > 0 && (revents & POLLNVAL)) return -EBADF;
  if (revents > 0) return 1;
  if (syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) == 0) return 0;
  return -errno;
}

/**
 * poll(2) of fds[0, n) for POLLIN with timeout 0, in one call (asked again when interrupted):
 * each fd's revents into revents[i]. Returns 0, or -errno (every revents then unknown).
 */
int tp_poll_many(const int32_t *fds, int n, int32_t *revents, struct pollfd *scratch) {
  for (int i = 0; i < n; i++) {
    scratch[i].fd = fds[i];
    scratch[i].events = POLLIN;
    scratch[i].revents = 0;
  }
  for (;;) {
    int r = poll(scratch, (nfds_t)n, 0);
    if (r >= 0) break;
    if (errno != EINTR) return -errno;
  }
  for (int i = 0; i < n; i++) revents[i] = scratch[i].revents;
  return 0;
}

// hold_one's results besides an fd, TP_HOLD_GONE and TP_HOLD_NO_PIDFD (pidfd_open failed with
// info[TP_INFO_ERRNO], not ESRCH).
#define HOLD_FAILED -1 // info says why (EMFILE on a read…): thrown
#define HOLD_FULL -4   // tp_prehold: the environ records have no room left

// Alive by isAliveStat (src/proc/identity.ts): not X; a zombie only while a thread other than
// the leader is listed in task/.
static int alive_stat(int dfd, int pid, uint8_t state) {
  if (state == 'X') return 0;
  if (state != 'Z') return 1;
  char path[64];
  snprintf(path, sizeof path, "%d/task", pid);
  int tfd = openat(dfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *td = tfd >= 0 ? fdopendir(tfd) : NULL;
  if (tfd >= 0 && !td) close(tfd);
  int other = 0;
  struct dirent *e;
  while (td && !other && (e = readdir(td)) != NULL) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && atoi(e->d_name) != pid) other = 1;
  }
  if (td) closedir(td);
  return other;
}

// The fd table of a process whose threads share it (Node's) grows by doubling, and each growth
// waits for an RCU grace period (the kernel's expand_fdtable: milliseconds on a busy machine):
// holding 1,000 new members from a table of 64 would wait five times. Once a hold gets fd 48 or
// higher, the table is grown at once to FD_TABLE_AHEAD slots (or the fd limit) by duplicating
// that fd to the lowest free number at or above the target (F_DUPFD never replaces an fd in
// use) and closing the copy: one wait. Tables never shrink, so this happens once per process.
#define FD_TABLE_AHEAD 4096
#define FD_TABLE_GROW_AT 48
static long fd_table_grown;

static void grow_fd_table(int fd) {
  if (fd < FD_TABLE_GROW_AT || fd < fd_table_grown) return;
  struct rlimit rl;
  long target = FD_TABLE_AHEAD - 1;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur - 1 < target)
    target = (long)rl.rlim_cur - 1;
  fd_table_grown = target > fd ? target + 1 : LONG_MAX; // past it: the kernel's own doubling
  if (target <= fd) return;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, (int)target);
  if (d >= 0) close(d);
}

// Holds one new member (tp_hold_batch): pidfd_open(pid); its stat re-read through `dfd`: the
// same start time, alive (alive_stat); the evidence, read after the fd was opened — a carrier's
// environ still holds `entry_hex` as a whole record (environ_one, through a live thread when
// `leader_exited`), a descendant's ppid is still `via` (TP_EVIDENCE_PARENT); the fd not readable
// (no exit since); then the report details of the held process: the real uid from
// ioctl(PIDFD_GET_INFO) — from status' `Uid:` on a kernel without it — in *uid (-1 unknown), and
// cmdline, at most `cmdline_limit` bytes, read into `text` (at least cmdline_limit + 1 bytes):
// cmd[0] KIND_*, cmd[1] its length, cmd[2] truncated.
// Returns the pidfd (>= 0, the caller's to close), TP_HOLD_GONE, TP_HOLD_NO_PIDFD (info[TP_INFO_ERRNO] the
// errno of pidfd_open: EMFILE…), or HOLD_FAILED (info; info[TP_INFO_FILE] names the file; the fd closed).
//
// With `env` (tp_prehold: a candidate carrier, TP_EVIDENCE_CARRIER), the environ read after the
// open is the one that decides membership: every session entry of it is collected into env->o
// (as tp_environ records them), env->read set, and the member is held when `entry_hex` is among
// them; env->ppid is the parent the re-read stat showed. When pidfd_open fails (not ESRCH) the
// environ is read all the same, unheld. HOLD_FULL: env->o has no room left (nothing kept).
struct env_read {
  struct env_out *o;
  int read, kind, oversized;
  double bytes, ppid;
};

// One member to hold: its pid and start time, the evidence re-read once its pidfd is open
// (TP_EVIDENCE_*; `via`: the parent of TP_EVIDENCE_PARENT), whether its leader has exited.
struct member {
  int pid;
  double start_time;
  int evidence, via, leader_exited;
};

// What every hold of one call shares: the root's fd, the session entry (TP_TAG_HEX_DIGITS hex
// digits, or NULL), the cmdline cap, the read buffer and `info`.
struct hold_call {
  int dfd;
  const uint8_t *entry_hex;
  long cmdline_limit;
  uint8_t *buf;
  int32_t *info;
};

static int hold_one(const struct hold_call *c, const struct member *m, uint8_t *text, double *uid, double *cmd,
                    struct env_read *env) {
  int dfd = c->dfd, pid = m->pid, evidence = m->evidence, leader_exited = m->leader_exited;
  const uint8_t *entry_hex = c->entry_hex;
  uint8_t *buf = c->buf;
  int32_t *info = c->info;
  *uid = -1;
  cmd[0] = TP_KIND_GONE;
  cmd[1] = 0;
  cmd[2] = 0;
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) grow_fd_table(fd);
  if (fd < 0) {
    int e = errno;
    if (e == ESRCH) return TP_HOLD_GONE;
    if (env != NULL) {
      if (environ_one(dfd, pid, leader_exited, ENVIRON_TIME_BUDGET_NS, buf, env->o, &env->kind, &env->bytes, &env->oversized, info) < 0) {
        info[TP_INFO_FILE] = TP_FILE_ENVIRON;
        return HOLD_FAILED;
      }
      if (env->o->full) return HOLD_FULL;
      env->read = 1;
    }
    info[TP_INFO_ERRNO] = e;
    return TP_HOLD_NO_PIDFD;
  }
  int result = TP_HOLD_GONE;
  char path[64];
  long len;
  int truncated, err, stage;
  // The fd was opened before this read: if the start time still matches now, the process
  // existed throughout and the fd names it.
  snprintf(path, sizeof path, "%d/stat", pid);
  int k = read_stat(dfd, path, buf, &len, &err, &stage);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    info[TP_INFO_FILE] = TP_FILE_STAT;
    result = HOLD_FAILED;
    goto done;
  }
  struct stat_line s;
  if (k != TP_KIND_OK || !parse_stat(buf, len, &s) || s.fields[F_START] != m->start_time ||
      !alive_stat(dfd, pid, s.state))
    goto done;
  if (evidence == TP_EVIDENCE_PARENT && s.fields[F_PPID] != (double)m->via) goto done;
  if (env != NULL) {
    env->ppid = s.fields[F_PPID];
    long first = env->o->at;
    if (environ_one(dfd, pid, leader_exited, ENVIRON_TIME_BUDGET_NS, buf, env->o, &env->kind, &env->bytes, &env->oversized, info) < 0) {
      info[TP_INFO_FILE] = TP_FILE_ENVIRON;
      result = HOLD_FAILED;
      goto done;
    }
    if (env->o->full) {
      result = HOLD_FULL;
      goto done;
    }
    env->read = 1;
    int found = 0;
    for (long at = first; entry_hex != NULL && !found && at + HEX <= env->o->at; at += HEX)
      found = memcmp(env->o->out + at, entry_hex, HEX) == 0;
    if (env->kind != TP_KIND_OK || !found) goto done;
  } else if (evidence == TP_EVIDENCE_CARRIER) {
    if (entry_hex == NULL) goto done; // not a session entry: no environ holds it
    struct env_out o = {NULL, 0, 0, 0, 0, 0, entry_hex, 0};
    int kind, oversized;
    double bytes;
    if (environ_one(dfd, pid, leader_exited, ENVIRON_TIME_BUDGET_NS, buf, &o, &kind, &bytes, &oversized, info) < 0) {
      info[TP_INFO_FILE] = TP_FILE_ENVIRON; // the file that failed: 3 environ
      result = HOLD_FAILED;
      goto done;
    }
    if (kind != TP_KIND_OK || !o.found) goto done;
  }
  if (pidfd_running(fd) == 0) goto done; // -1 (poll failed): not known to have exited
  *uid = pidfd_ruid(fd);
  if (*uid < 0 && status_uid(dfd, pid, buf, uid, info) < 0) {
    result = HOLD_FAILED;
    goto done;
  }
  snprintf(path, sizeof path, "%d/cmdline", pid);
  k = read_cmdline(dfd, path, text, c->cmdline_limit, &len, &truncated, &err, &stage);
  if (k < 0) {
    fail(info, err, stage, pid, 0);
    info[TP_INFO_FILE] = TP_FILE_CMDLINE;
    result = HOLD_FAILED;
    goto done;
  }
  cmd[0] = k;
  if (k == TP_KIND_OK) {
    cmd[1] = (double)len;
    cmd[2] = truncated;
  }
  result = fd;
done:
  if (result < 0) close(fd);
  return result;
}

/**
 * Holds the new members of one scan in one call: hold_one for member i = pids[i] with
 * start_times[i], evidence[i] (EVIDENCE_*), via[i] (the parent of TP_EVIDENCE_PARENT),
 * leader_exited[i]; a carrier's entry is `entry_hex` (32 hex digits; NULL: the entry is no
 * session entry, so no carrier holds). Each member's record, rec[TP_HOLD_RECORD * i…]: [0] the
 * pidfd (>= 0, the caller's to close), TP_HOLD_GONE or TP_HOLD_NO_PIDFD; [1] the errno of a failed
 * pidfd_open; [2] the real uid (-1 unknown); [3] cmdline KIND_*; [4] its offset in `text`;
 * [5] its length; [6] truncated. The cmdlines go to text[0, cap), one after another: member i is
 * started only while cmdline_limit + 1 bytes are left, so the call may stop early.
 * Returns the members done (call again with the rest and a larger `text`; 0 only when `cap` is
 * smaller than cmdline_limit + 1), or -1 (info: the read that failed, info[TP_INFO_MORE] the member's
 * index; the fds this call opened are closed, none is returned).
 */
long tp_hold_batch(const struct tp_proc *p, const struct tp_hold_args *a) {
  const char *root = p->root;
  int rootfd = p->rootfd, n = a->n;
  uint8_t *buf = p->buf, *text = a->text;
  int32_t *info = p->info;
  const int32_t *pids = a->pids;
  long cmdline_limit = a->cmdline_limit, cap = a->text_cap;
  double *rec = a->rec;
  info[TP_INFO_MORE] = 0;
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    fail(info, errno, TP_STAGE_ROOT, n > 0 ? pids[0] : 0, 0);
    info[TP_INFO_FILE] = TP_FILE_STAT;
    return -1;
  }
  long at = 0;
  struct hold_call call = {dfd, a->entry_hex, cmdline_limit, buf, info};
  int i;
  for (i = 0; i < n && at + cmdline_limit + 1 <= cap; i++) {
    double *r = rec + (long)TP_HOLD_RECORD * i;
    double cmd[3];
    struct member m = {pids[i], a->start_times[i], a->evidence[i], a->via[i], a->leader_exited[i]};
    int fd = hold_one(&call, &m, text + at, &r[TP_HOLD_UID], cmd, NULL);
    if (fd == HOLD_FAILED) {
      for (int j = 0; j < i; j++) {
        int held = (int)rec[(long)TP_HOLD_RECORD * j + TP_HOLD_FD];
        if (held >= 0) close(held);
      }
      info[TP_INFO_MORE] = i;
      root_done(dfd, own);
      return -1;
    }
    r[TP_HOLD_FD] = fd;
    r[TP_HOLD_ERRNO] = fd == TP_HOLD_NO_PIDFD ? info[TP_INFO_ERRNO] : 0;
    r[TP_HOLD_KIND] = cmd[0];
    r[TP_HOLD_TEXT_AT] = (double)at;
    r[TP_HOLD_CMDLINE_LENGTH] = cmd[1];
    r[TP_HOLD_TRUNCATED] = cmd[2];
    at += (long)cmd[1];
  }
  root_done(dfd, own);
  return i;
}

/**
 * Reads the environ of each candidate carrier of a scan from the process it holds: for
 * candidate i = pids[i] (start_times[i], leader_exited[i]), hold_one with `env` — pidfd_open,
 * the stat re-read (same start time, alive), the environ read and its session entries
 * collected, and when `entry_hex` (32 hex digits, or NULL) is among them: the fd not readable,
 * then the uid and cmdline, and the fd kept. Writes, per candidate, its environ record to env
 * (as tp_environ: u8 kind, u8 oversized, f64 bytes, u32 count, count × 32 hex digits; kind
 * GONE when the process the walk saw is gone: ESRCH, another start time, not alive) and its
 * hold record to rec (as tp_hold_batch; [0] TP_HOLD_GONE unless held or TP_HOLD_NO_PIDFD, [7] the
 * ppid the re-read stat showed, -1 when not read). With `sig` > 0, a carrier held with
 * may_signal[i] set is sent `sig` through its pidfd right after its details were read
 * (tp_send_held: its exit polled, then pidfd_send_signal), its result in rec[8] (else TP_NOT_SENT):
 * so that its teardown starts while the batch goes on, as the floor's does. Returns the
 * candidates done (fewer than n when env (TP_PREHOLD_ENV_FULL) or text (TP_PREHOLD_TEXT_FULL) has no room: call
 * again for the rest with a larger one), or -1 (info; TP_PREHOLD_FAILED; the fds this call opened are
 * closed) — but when a read fails after this call sent a signal: the candidates done before it
 * (TP_PREHOLD_FAILED_AFTER_SIGNAL, the failure in info; their fds open), so that the caller can still say what it
 * signalled.
 */
long tp_prehold(const struct tp_proc *p, const struct tp_prehold_args *a) {
  const char *root = p->root;
  int rootfd = p->rootfd, n = a->n;
  uint8_t *buf = p->buf, *text = a->text, *env = a->env;
  int32_t *info = p->info;
  const int32_t *pids = a->pids;
  long cmdline_limit = a->cmdline_limit, text_cap = a->text_cap, env_cap = a->env_cap;
  double *rec = a->rec;
  info[TP_INFO_MORE] = 0;
  int signalled = 0;
  int own;
  int dfd = root_of(root, rootfd, &own);
  if (dfd < 0) {
    fail(info, errno, TP_STAGE_ROOT, n > 0 ? pids[0] : 0, 0);
    info[TP_INFO_FILE] = TP_FILE_STAT;
    info[TP_INFO_MORE] = TP_PREHOLD_FAILED;
    return -1;
  }
  struct env_out o = {env, env_cap, 0, 0, 0, 0, NULL, 0};
  long at = 0;
  struct hold_call call = {dfd, a->entry_hex, cmdline_limit, buf, info};
  int i;
  for (i = 0; i < n; i++) {
    if (at + cmdline_limit + 1 > text_cap) {
      info[TP_INFO_MORE] = TP_PREHOLD_TEXT_FULL;
      break;
    }
    long start = o.at;
    if (start + TP_ENV_HEAD > env_cap) {
      info[TP_INFO_MORE] = TP_PREHOLD_ENV_FULL;
      break;
    }
    o.head = start;
    o.at = start + TP_ENV_HEAD;
    o.count = 0;
    o.full = 0;
    double *r = rec + (long)TP_HOLD_RECORD * i;
    double cmd[3];
    struct env_read e = {&o, 0, TP_KIND_GONE, 0, 0, -1};
    struct member m = {pids[i], a->start_times[i], TP_EVIDENCE_CARRIER, 0, a->leader_exited[i]};
    int fd = hold_one(&call, &m, text + at, &r[TP_HOLD_UID], cmd, &e);
    if (fd == HOLD_FAILED) {
      root_done(dfd, own);
      if (signalled) {
        info[TP_INFO_MORE] = TP_PREHOLD_FAILED_AFTER_SIGNAL;
        return i;
      }
      for (int j = 0; j < i; j++) {
        int held = (int)rec[(long)TP_HOLD_RECORD * j + TP_HOLD_FD];
        if (held >= 0) close(held);
      }
      info[TP_INFO_MORE] = TP_PREHOLD_FAILED;
      return -1;
    }
    if (fd == HOLD_FULL) {
      o.at = start;
      info[TP_INFO_MORE] = TP_PREHOLD_ENV_FULL;
      break;
    }
    if (!e.read) {
      e.kind = TP_KIND_GONE;
      e.bytes = 0;
      e.oversized = 0;
      o.count = 0;
      o.at = start + TP_ENV_HEAD;
    }
    env[start + TP_ENV_KIND_AT] = (uint8_t)e.kind;
    env[start + TP_ENV_OVERSIZED_AT] = (uint8_t)e.oversized;
    memcpy(env + start + TP_ENV_BYTES_AT, &e.bytes, 8);
    uint32_t c = (uint32_t)o.count;
    memcpy(env + start + TP_ENV_COUNT_AT, &c, 4);
    r[TP_HOLD_FD] = fd;
    r[TP_HOLD_ERRNO] = fd == TP_HOLD_NO_PIDFD ? info[TP_INFO_ERRNO] : 0;
    r[TP_HOLD_KIND] = cmd[0];
    r[TP_HOLD_TEXT_AT] = (double)at;
    r[TP_HOLD_CMDLINE_LENGTH] = cmd[1];
    r[TP_HOLD_TRUNCATED] = cmd[2];
    r[TP_HOLD_PPID] = e.ppid;
    r[TP_HOLD_SENT] = TP_NOT_SENT;
    if (fd >= 0 && a->sig > 0 && a->may_signal != NULL && a->may_signal[i]) {
      r[TP_HOLD_SENT] = tp_send_held(fd, a->sig);
      signalled = 1;
    }
    at += (long)cmd[1];
  }
  root_done(dfd, own);
  return i;
}

// ---------------------------------------------------------------------------------------------
// tp_walk: takeSnapshot's walk and, in the same pass, the environ of each process a scan reads
// (stat then environ per pid, as the C loop of bench/environ-loop.c reads them), its results
// packed for the caller to read without an object per process (src/proc/table.ts).

// Records (TP_W_*) and sizes (TP_WS_*): tether.h.
#define ENV_FIRST (64 * 1024) // the environ entries' first array: 2,000 entries

// The last walk's results, kept on the C side until tp_walk_take copies them out: each array
// grows (doubling) with the table, so that a walk is never repeated for want of room.
// (Each function takes its address once: a thread-local of a library loaded by dlopen costs a
// call per access.)
struct walk_state {
  double *rec;
  uint8_t *text, *env;
  int32_t *notable;
  long n, rec_cap, text_len, text_cap, env_len, env_cap, notable_n, notable_cap;
};
static _Thread_local struct walk_state walk_tls;

static void walk_drop(void) {
  struct walk_state *w = &walk_tls;
  free(w->rec);
  free(w->text);
  free(w->env);
  free(w->notable);
  memset(w, 0, sizeof *w);
}

// Room for `more` bytes after `len` in a doubling array of `*cap` bytes (`first` when none);
// 0, or -1 when out of memory.
static int reserve(void **p, long *cap, long len, long more, long first) {
  if (len + more <= *cap) return 0;
  long c = *cap > 0 ? *cap : first;
  while (len + more > c) c *= 2;
  void *bigger = realloc(*p, (size_t)c);
  if (!bigger) return -1;
  *p = bigger;
  *cap = c;
  return 0;
}

// pid → record index: open addressing over a power-of-two table of at least twice the records.
static long index_cap_for(long n) {
  long cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}
static uint32_t pid_slot(int32_t pid, long cap) { return ((uint32_t)pid * 2654435761u) & (uint32_t)(cap - 1); }

// `pid` (of start time `start`) is among the skip_n pairs sorted by pid: a start time of -1
// names the pid whatever process holds it.
static int skipped(int32_t pid, double start, const int32_t *pids, const double *starts, int n) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (pids[mid] < pid) lo = mid + 1;
    else if (pids[mid] > pid) hi = mid - 1;
    else {
      while (mid > 0 && pids[mid - 1] == pid) mid--;
      for (; mid < n && pids[mid] == pid; mid++)
        if (starts[mid] < 0 || starts[mid] == start) return 1;
      return 0;
    }
  }
  return 0;
}

static int alive_stat(int dfd, int pid, uint8_t state);

// The environ of record `r` (pid `pid`, zombie leader when `state` is Z) read into w->env;
// 0, or -1 (info; sizes[TP_WS_FILE] = 3).
static int walk_environ(int dfd, int pid, uint8_t state, const uint8_t *entry_hex, uint8_t *buf, double *r,
                        int32_t *sizes, int32_t *info) {
  struct walk_state *w = &walk_tls;
  struct env_out o = {NULL, 0, 0, 0, 0, 0, NULL, 0};
  if (w->env == NULL && reserve((void **)&w->env, &w->env_cap, 0, ENV_FIRST, ENV_FIRST) < 0) {
    fail(info, ENOMEM, TP_STAGE_ROOT, pid, 0);
    return -1;
  }
  for (;;) {
    o.out = w->env;
    o.cap = w->env_cap;
    o.at = w->env_len;
    int kind, oversized;
    double bytes;
    if (environ_one(dfd, pid, state == 'Z', ENVIRON_TIME_BUDGET_NS, buf, &o, &kind, &bytes, &oversized, info) < 0) {
      sizes[TP_WS_FILE] = 3;
      return -1;
    }
    if (o.full) {
      // Read again into a larger array (rare: a few entries fit the first 4 KiB).
      if (reserve((void **)&w->env, &w->env_cap, w->env_cap, w->env_cap > 0 ? w->env_cap : ENV_FIRST, ENV_FIRST) < 0) {
        fail(info, ENOMEM, TP_STAGE_ROOT, pid, 0);
        return -1;
      }
      continue;
    }
    r[TP_W_ENV_KIND] = kind;
    r[TP_W_ENV_OVERSIZED] = oversized;
    r[TP_W_ENV_BYTES] = bytes;
    r[TP_W_ENV_AT] = (double)w->env_len;
    r[TP_W_ENV_COUNT] = (double)o.count;
    for (long at = w->env_len; entry_hex != NULL && at + HEX <= o.at; at += HEX)
      if (memcmp(w->env + at, entry_hex, HEX) == 0) r[TP_W_CARRIER] = 1;
    w->env_len = o.at;
    return 0;
  }
}

/**
 * One pass over `root` (readdir order): each numeric entry's stat read and parsed, kernel
 * threads (TP_PF_KTHREAD) and unparsable lines left out — takeSnapshot's walk — and, with
 * `env_from` >= 0, right after its stat the environ of each process with pid > 1, a start time
 * >= env_from and alive (isAliveStat), but for the skipped ones (skip_pids sorted, skip_starts
 * their start times, -1: any), read as tp_environ reads one (its session entries, through a
 * live thread for a zombie leader); each is checked for `entry_hex` (32 hex digits, or NULL).
 * The results are kept for tp_walk_take, their sizes in sizes[WS_*]: the records (TP_WALK_RECORD
 * doubles each, W_*), the comm bytes, the environ entries (32 hex digits each), the notable
 * records (the indices of those of start >= env_from skipped, or whose environ holds a session
 * entry, is oversized or denied) and the pid index's slots.
 * Returns the records, or -1 (info: errno, stage, pid, tid; sizes[TP_WS_FILE]: 0 stat, 3 environ).
 */
long tp_walk(const struct tp_proc *p, const struct tp_walk_args *a, int32_t *sizes) {
  const char *root = p->root;
  int rootfd = p->rootfd;
  uint8_t *buf = p->buf;
  int32_t *info = p->info;
  double env_from = a->env_from;
  struct walk_state *w = &walk_tls;
  walk_drop();
  sizes[TP_WS_FILE] = 0;
  int dfd = rootfd >= 0 ? openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : open_root(root);
  if (dfd < 0) {
    fail(info, errno, TP_STAGE_ROOT, 0, 0);
    return -1;
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    fail(info, errno, TP_STAGE_ROOT, 0, 0);
    close(dfd);
    return -1;
  }
  char path[64];
  struct dirent *e;
  int failed = 0;
  for (errno = 0; !failed && (e = readdir(d)) != NULL; errno = 0) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    size_t nl = strlen(e->d_name);
    if (nl > 40) continue;
    memcpy(path, e->d_name, nl);
    memcpy(path + nl, "/stat", 6);
    long len;
    int err, stage;
    int k = read_stat(dfd, path, buf, &len, &err, &stage);
    if (k < 0) {
      fail(info, err, stage, atoi(e->d_name), 0);
      failed = 1;
      break;
    }
    struct stat_line s;
    if (k != TP_KIND_OK || !parse_stat(buf, len, &s)) continue;
    if (((uint32_t)s.fields[F_FLAGS] & TP_PF_KTHREAD) != 0) continue;
    long rec_bytes = w->n * TP_WALK_RECORD * 8;
    if (reserve((void **)&w->rec, &w->rec_cap, rec_bytes, TP_WALK_RECORD * 8, 1024 * TP_WALK_RECORD * 8) < 0 ||
        reserve((void **)&w->text, &w->text_cap, w->text_len, s.comm_len, 16 * 1024) < 0 ||
        reserve((void **)&w->notable, &w->notable_cap, w->notable_n * 4, 4, 4096) < 0) {
      fail(info, ENOMEM, TP_STAGE_ROOT, 0, 0);
      failed = 1;
      break;
    }
    double *r = w->rec + w->n * TP_WALK_RECORD;
    r[TP_W_PID] = s.pid;
    r[TP_W_PPID] = s.fields[F_PPID];
    r[TP_W_PGID] = s.fields[F_PGID];
    r[TP_W_SID] = s.fields[F_SID];
    r[TP_W_FLAGS] = s.fields[F_FLAGS];
    r[TP_W_THREADS] = s.fields[F_THREADS];
    r[TP_W_START] = s.fields[F_START];
    r[TP_W_STATE] = s.state;
    r[TP_W_COMM_AT] = (double)w->text_len;
    r[TP_W_COMM_LEN] = (double)s.comm_len;
    memcpy(w->text + w->text_len, buf + s.comm_at, (size_t)s.comm_len);
    w->text_len += s.comm_len;
    r[TP_W_ENV_KIND] = -1;
    r[TP_W_ENV_OVERSIZED] = r[TP_W_ENV_BYTES] = r[TP_W_ENV_AT] = r[TP_W_ENV_COUNT] = r[TP_W_CARRIER] = 0;
    long index = w->n++;
    int pid = (int)s.pid;
    if (env_from < 0 || pid <= 1 || s.fields[F_START] < env_from) continue;
    int notable = 1; // skipped: the caller decides about it
    if (!skipped(pid, s.fields[F_START], a->skip_pids, a->skip_starts, a->skip_n)) {
      if (!alive_stat(dfd, pid, s.state)) continue;
      if (walk_environ(dfd, pid, s.state, a->entry_hex, buf, r, sizes, info) < 0) {
        failed = 1;
        break;
      }
      notable = r[TP_W_ENV_COUNT] > 0 || r[TP_W_ENV_OVERSIZED] != 0 || r[TP_W_ENV_KIND] == TP_KIND_DENIED;
    }
    if (notable) w->notable[w->notable_n++] = (int32_t)index;
  }
  int rerr = failed ? 0 : errno;
  closedir(d);
  if (!failed && rerr != 0) {
    fail(info, rerr, TP_STAGE_ROOT, 0, 0);
    failed = 1;
  }
  if (failed) {
    walk_drop();
    return -1;
  }
  sizes[TP_WS_RECORDS] = (int32_t)w->n;
  sizes[TP_WS_TEXT] = (int32_t)w->text_len;
  sizes[TP_WS_ENV] = (int32_t)w->env_len;
  sizes[TP_WS_NOTABLE] = (int32_t)w->notable_n;
  sizes[TP_WS_INDEX] = (int32_t)index_cap_for(w->n);
  return w->n;
}

/**
 * The last tp_walk's results copied out, and released: the records to rec, the comm bytes to
 * text, the environ entries to env, the notable indices to notable; the pid index to index
 * (sizes[TP_WS_INDEX] slots, each a record index or -1: a pid's slot is pid_slot, then the next
 * ones); each record's first child and next sibling, by ppid (record indices, in readdir order;
 * -1 none), to first_child and next_sibling. Returns the records.
 */
long tp_walk_take(double *rec, uint8_t *text, uint8_t *env, int32_t *notable, int32_t *index,
                  int32_t *first_child, int32_t *next_sibling) {
  struct walk_state *w = &walk_tls;
  long n = w->n, cap = index_cap_for(n);
  uint32_t mask = (uint32_t)(cap - 1);
  if (n > 0) memcpy(rec, w->rec, (size_t)(n * TP_WALK_RECORD * 8));
  if (w->text_len > 0) memcpy(text, w->text, (size_t)w->text_len);
  if (w->env_len > 0) memcpy(env, w->env, (size_t)w->env_len);
  if (w->notable_n > 0) memcpy(notable, w->notable, (size_t)w->notable_n * 4);
  for (long i = 0; i < cap; i++) index[i] = -1;
  for (long i = 0; i < n; i++) {
    uint32_t h = pid_slot((int32_t)w->rec[i * TP_WALK_RECORD + TP_W_PID], cap);
    while (index[h] >= 0) h = (h + 1) & mask;
    index[h] = (int32_t)i;
    first_child[i] = next_sibling[i] = -1;
  }
  // Records visited last to first, each put before its siblings: children in readdir order.
  for (long i = n - 1; i >= 0; i--) {
    int32_t ppid = (int32_t)w->rec[i * TP_WALK_RECORD + TP_W_PPID];
    uint32_t h = pid_slot(ppid, cap);
    while (index[h] >= 0 && (int32_t)w->rec[(long)index[h] * TP_WALK_RECORD + TP_W_PID] != ppid) h = (h + 1) & mask;
    if (index[h] < 0) continue;
    next_sibling[i] = first_child[index[h]];
    first_child[index[h]] = (int32_t)i;
  }
  walk_drop();
  return n;
}

/** strerror(3) of `err`, for an error message worded as Node words its own. */
const char *tp_strerror(int err) { return strerror(err); }
