// The contract between the native library (native/scan.c, native/spool.c) and its binding
// (src/proc/native.ts, src/proc/native-files.ts): every constant, record layout, struct and tp_*
// function the TypeScript side uses, written once. scan.c and spool.c include it, so the compiler
// holds the C side to it; test/proc/native-contract.test.ts
// reads it and fails when the koffi tables (NATIVE_FUNCTIONS, NATIVE_STRUCTS), a constant of the
// binding (TP) or one of the JS path differs (docs/decisions.md D22).
//
// The test reads `#define TP_*` lines (a number, an arithmetic of numbers, or a string),
// `enum { TP_* }` lists, `struct tp_* { … };` (one member per line) and the tp_* declarations
// below; keep them in those shapes.
#ifndef TETHER_H
#define TETHER_H

#include <stdint.h>

struct pollfd;

// Bytes that hold C strings one after another (each NUL-terminated): passed as a Buffer, not as a
// JS string. The same type as char, so a definition with `const char *` matches.
typedef char tp_strings;

// ---- What the JS path reads by the same rules (the name in TS, its module) ------------------

#define TP_READ_BUFFER_BYTES (64 * 1024)         // READ_BUFFER_BYTES, src/proc/read.ts
#define TP_ENVIRON_BYTE_BUDGET (6 * 1024 * 1024) // ENVIRON_BYTE_BUDGET, src/proc/environ.ts
#define TP_ENVIRON_TIME_BUDGET_MS 100            // ENVIRON_TIME_BUDGET_MS, src/proc/environ.ts
#define TP_STATUS_READ_BYTES 4096                // STATUS_READ_BYTES, src/proc/details.ts
#define TP_PF_KTHREAD 0x00200000                 // PF_KTHREAD, src/proc/stat.ts
#define TP_TAG_PREFIX "TETHER_SESSION_"          // TAG_PREFIX, src/proc/tag.ts
#define TP_TAG_HEX_DIGITS 32                     // the hex digits of a tag (TAG_ENTRY_PATTERN)

// ---- Outcomes and failures ------------------------------------------------------------------

// A file's read: an answer (ok, the process gone, access denied).
enum { TP_KIND_OK = 0, TP_KIND_GONE = 1, TP_KIND_DENIED = 2 };

// `info` (int32_t[TP_INFO_LENGTH]): a failed call's errno, the stage that failed, the pid and
// thread; TP_INFO_FILE the file (TP_FILE_*; tp_environ: the pids done); TP_INFO_MORE the
// member's index (tp_cmdlines, tp_hold_batch) or why tp_prehold stopped (TP_PREHOLD_*).
enum { TP_INFO_ERRNO = 0, TP_INFO_STAGE, TP_INFO_PID, TP_INFO_TID, TP_INFO_FILE, TP_INFO_MORE, TP_INFO_LENGTH };
enum { TP_STAGE_ROOT = 0, TP_STAGE_OPEN, TP_STAGE_READ, TP_STAGE_TASKS };
enum { TP_FILE_STAT = 0, TP_FILE_STATUS, TP_FILE_CMDLINE, TP_FILE_ENVIRON };

// tp_environ: not even one record fits `cap` (the caller grows `out` and calls again).
#define TP_NO_ROOM (-2)

// ---- Records ----------------------------------------------------------------------------------

// tp_stat's record: 8 float64 (pid, ppid, pgid, sid, flags, threads, start time, state), then a
// uint16 comm length at TP_STAT_COMM_LENGTH_AT and the comm bytes at TP_STAT_RECORD_HEAD.
#define TP_STAT_COMM_LENGTH_AT (8 * 8)
#define TP_STAT_RECORD_HEAD (8 * 8 + 2)

// An environ record (tp_environ, tp_prehold): u8 kind, u8 oversized, f64 bytes, u32 entry count,
// then count × TP_TAG_HEX_DIGITS bytes, from TP_ENV_HEAD on.
enum { TP_ENV_KIND_AT = 0, TP_ENV_OVERSIZED_AT = 1, TP_ENV_BYTES_AT = 2, TP_ENV_COUNT_AT = 10, TP_ENV_HEAD = 14 };

// tp_details' `out` (double[TP_DETAILS_LENGTH]) and tp_cmdlines' record (doubles).
enum { TP_DETAILS_UID = 0, TP_DETAILS_KIND, TP_DETAILS_CMDLINE_LENGTH, TP_DETAILS_TRUNCATED, TP_DETAILS_LENGTH };
enum { TP_CMDLINE_KIND = 0, TP_CMDLINE_AT, TP_CMDLINE_LENGTH, TP_CMDLINE_TRUNCATED, TP_CMDLINE_RECORD };

// A hold: what must still be true of the member (tp_hold_batch's `evidence`), its record
// (doubles: tp_hold_batch, tp_prehold), and the record's fd when nothing is held.
enum { TP_EVIDENCE_IDENTITY = 0, TP_EVIDENCE_CARRIER = 1, TP_EVIDENCE_PARENT = 2 };
enum {
  TP_HOLD_FD = 0,
  TP_HOLD_ERRNO,
  TP_HOLD_UID,
  TP_HOLD_KIND,
  TP_HOLD_TEXT_AT,
  TP_HOLD_CMDLINE_LENGTH,
  TP_HOLD_TRUNCATED,
  TP_HOLD_PPID,
  TP_HOLD_SENT,
  TP_HOLD_RECORD = 10
};
#define TP_HOLD_GONE (-2)
#define TP_HOLD_NO_PIDFD (-3)
#define TP_NOT_SENT 2 // a TP_HOLD_SENT when no signal was sent (else tp_send_held's result)
// Why tp_prehold stopped (info[TP_INFO_MORE]).
enum {
  TP_PREHOLD_ENV_FULL = 1,
  TP_PREHOLD_TEXT_FULL = 2,
  TP_PREHOLD_FAILED = 3,
  TP_PREHOLD_FAILED_AFTER_SIGNAL = 4
};

// tp_walk's record (doubles, TP_WALK_RECORD each) and its sizes (int32_t[TP_WS_LENGTH]).
enum {
  TP_W_PID = 0,
  TP_W_PPID,
  TP_W_PGID,
  TP_W_SID,
  TP_W_FLAGS,
  TP_W_THREADS,
  TP_W_START,
  TP_W_STATE,
  TP_W_COMM_AT,
  TP_W_COMM_LEN,
  TP_W_ENV_KIND, // -1 not read (not asked, or skipped), else TP_KIND_*
  TP_W_ENV_OVERSIZED,
  TP_W_ENV_BYTES,
  TP_W_ENV_AT, // its entries' offset in the environ bytes
  TP_W_ENV_COUNT,
  TP_W_CARRIER, // 1: the environ read holds `entry_hex` as a whole record
  TP_WALK_RECORD
};
enum { TP_WS_RECORDS = 0, TP_WS_TEXT, TP_WS_ENV, TP_WS_NOTABLE, TP_WS_INDEX, TP_WS_FILE, TP_WS_LENGTH };

// ---- native/scan.c: the arguments of a batch call, grouped ---------------------------------
// A call that reads a batch of processes takes where it reads (`struct tp_proc`) and its own
// arguments (`struct tp_*_args`), each by pointer: koffi builds them from JS objects (one
// conversion per call: a batch call is made once a scan). The calls made once per process
// (tp_stat, tp_details, tp_poll1, tp_send_held) keep their few arguments positional.

// Where a call reads and what it says when it fails: the /proc root (`root`, and `rootfd`, an
// O_DIRECTORY fd of it from tp_open_root that the caller keeps, or -1: opened at each call),
// the caller's read buffer (`buf`, TP_READ_BUFFER_BYTES: every file is read through it) and
// `info` (int32_t[TP_INFO_LENGTH]).
struct tp_proc {
  const char *root;
  int rootfd;
  uint8_t *buf;
  int32_t *info;
};

// tp_walk: with `env_from` >= 0, the environ of each process started at or after it (clock
// ticks) but the `skip_n` skipped (skip_pids sorted, skip_starts their start times, -1: any
// process at that pid), each checked for `entry_hex` (TP_TAG_HEX_DIGITS hex digits, or NULL).
struct tp_walk_args {
  double env_from;
  const int32_t *skip_pids;
  const double *skip_starts;
  int skip_n;
  const uint8_t *entry_hex;
};

// tp_environ: pids[0, n) (leader_exited[i]: read through a live thread), each within `budget_ms`;
// the environ records into out[0, cap).
struct tp_environ_args {
  const int32_t *pids;
  const uint8_t *leader_exited;
  int n;
  double budget_ms;
  uint8_t *out;
  long cap;
};

// tp_cmdlines: pids[0, n), at most `limit` bytes each; records (TP_CMDLINE_RECORD doubles each)
// into `rec`, the bytes into text[0, text_cap).
struct tp_cmdlines_args {
  const int32_t *pids;
  int n;
  long limit;
  double *rec;
  uint8_t *text;
  long text_cap;
};

// tp_hold_batch: member i is pids[i] with start_times[i], evidence[i] (TP_EVIDENCE_*), via[i]
// (its parent, for TP_EVIDENCE_PARENT), leader_exited[i]; a carrier's entry is `entry_hex` (NULL:
// none holds). Records (TP_HOLD_RECORD doubles each) into `rec`, cmdlines of at most
// `cmdline_limit` bytes into text[0, text_cap).
struct tp_hold_args {
  const int32_t *pids;
  const double *start_times;
  const uint8_t *evidence;
  const int32_t *via;
  const uint8_t *leader_exited;
  int n;
  const uint8_t *entry_hex;
  long cmdline_limit;
  double *rec;
  uint8_t *text;
  long text_cap;
};

// tp_prehold: candidate i is pids[i] with start_times[i], leader_exited[i]; the rest as
// tp_hold_args, and the environ records into env[0, env_cap). With `sig` > 0, a carrier held
// whose may_signal[i] is set is sent `sig` through its pidfd.
struct tp_prehold_args {
  const int32_t *pids;
  const double *start_times;
  const uint8_t *leader_exited;
  int n;
  const uint8_t *entry_hex;
  long cmdline_limit;
  double *rec;
  uint8_t *text;
  long text_cap;
  uint8_t *env;
  long env_cap;
  int sig;
  const uint8_t *may_signal;
};

int tp_open_root(const char *root);
long tp_walk(const struct tp_proc *p, const struct tp_walk_args *a, int32_t *sizes);
long tp_walk_take(double *rec, uint8_t *text, uint8_t *env, int32_t *notable, int32_t *index,
                  int32_t *first_child, int32_t *next_sibling);
long tp_stat(const char *root, int rootfd, int pid, uint8_t *buf, uint8_t *out, long cap, int32_t *info);
long tp_environ(const struct tp_proc *p, const struct tp_environ_args *a);
int tp_details(const char *root, int rootfd, int pid, long cmdline_limit, uint8_t *buf, double *out,
               int32_t *info);
long tp_cmdlines(const struct tp_proc *p, const struct tp_cmdlines_args *a);
long tp_hold_batch(const struct tp_proc *p, const struct tp_hold_args *a);
long tp_prehold(const struct tp_proc *p, const struct tp_prehold_args *a);
int tp_poll1(int fd);
int tp_poll_many(const int32_t *fds, int n, int32_t *revents, struct pollfd *scratch);
int tp_send_held(int fd, int sig);
const char *tp_strerror(int err);

// ---- native/spool.c (the stages a failed call names, and tp_head's other answer) --------------

enum {
  TP_SPOOL_STAGE_OPEN = 1,
  TP_SPOOL_STAGE_WRITE,
  TP_SPOOL_STAGE_LINK,
  TP_SPOOL_STAGE_RENAME,
  TP_SPOOL_STAGE_READ,
  TP_SPOOL_STAGE_LSTAT,
  TP_SPOOL_STAGE_MKDIR
};
#define TP_SPOOL_NOT_REGULAR (-100000) // tp_head: the path names something other than a regular file

long tp_head(const char *path, uint8_t *buf, long n, int32_t *stage);
int tp_find_addon(const char *start, const char *pkg, const tp_strings *places, int count, char *root, long cap);
int tp_spool_dir(const char *dir, int32_t *stage);
int tp_spool_put(const char *tmp, const char *name, const uint8_t *data, long len, int how, int32_t *stage);
int tp_host(char *machine, char *boot, long boot_cap, double *ns_ino);

#endif
