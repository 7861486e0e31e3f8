// tether-helper: the session's subreaper (docs/containment.md, "The helper"). tini is the model:
// one loop of a few named steps.
//
//   tether-helper [--grace MS] [--kill-after MS] [--cgroup DIR] [--pidns] -- CMD [ARG...]
//
// It marks itself a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER), starts CMD with its own
// environment and stdio, hands fds 0-2 over (its own become /dev/null: it holds none of the
// payload's pipes open), reaps every child, and stays until the supervisor releases it. Every
// process the payload starts, however it detaches, stays a descendant of the helper. EOF on the
// control pipe without a release (the supervisor died), or a SIGTERM from anyone but the
// supervisor, runs the dead man's switch: the helper ends its subtree itself. It leaves the
// caller's process group (the payload keeps it), so that a kill of that group — the supervisor's
// and the payload's — leaves the helper to run that switch.
//
// The wire protocol (fds 3, 4 and 5: every line and byte, in each direction, and what the
// reader does with an unknown or malformed one) is the table in docs/containment.md, "The
// helper's wire protocol"; src/containment/helper-protocol.ts reads it. Each errno a system
// call can return here has a meaning: retried (EINTR), fine (ESRCH: already gone), or a `warn`
// line on the status pipe — see the same page, "What each errno means".
//
// --pidns: the payload runs as the child of an init in a new PID namespace with its own /proc
// (CLONE_NEWPID | CLONE_NEWNS); when the helper releases or kills that init, the kernel kills
// everything left in the namespace.
//
// --name PATH: the file the sandbox's wrapper pinned and ran through /proc/PID/fd/N (so that a
// file renamed over PATH meanwhile is not what runs); shown in ps and the report, never opened.
//
// --wrap (first; the sandbox's completion wrapper wrap.sh, docs/sandbox.md, "The helper
// holds the nonce"): the helper proves the command's end itself, so that no process of the
// session's uid can read or forge the proof. Non-dumpable (prctl(2) PR_SET_DUMPABLE 0) before
// it reads anything; then it waits for `checked` on the control pipe — the shell hashed the inode
// this process was exec'd from after the exec, when the kernel refuses every write to it
// (ETXTBSY) — refuses a tracer that attached before the prctl, reads the nonce line from stdin
// (never argv or the environment) and prints `tether-start NONCE helper PID START` (its own
// identity, which the session's sweep asks the kernel about: docs/sandbox.md, "The helper's
// proof"); once the payload is reaped, `tether-end NONCE exit STATUS` on the same stream, the
// completion line tether reads.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STATUS_FD 3
#define CONTROL_FD 4
#define ANSWER_FD 5
#define SCAN_INTERVAL_MS 50
#define CHECKED_WAIT_MS 60000 // wrap mode: the longest wait for the shell's `checked`

static long grace_ms = 5000, kill_after_ms = 3000;
static const char *cgroup_dir;
static int pidns;

static pid_t supervisor, payload = -1, ns_init = -1;
static int payload_pidfd = -1;
static int sfd = -1; // the signalfd every catchable signal arrives on
static int payload_reaped;

// Wrap mode (--wrap): the helper holds the completion nonce and writes the completion lines.
static int wrap;
static int out_fd = -1; // the stream's stdout, kept for the end line; -1 once it is written
static char nonce[33];  // 32 hex digits, then NUL; zeroed once the end line is written

// ---- small utilities -------------------------------------------------------------------------

// write(2) of all of `len` bytes, EINTR retried and a short write continued. 0, or -1 with errno.
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

// One status line to the supervisor. A failed write has nowhere else to go: EPIPE (SIGPIPE is
// ignored) means the supervisor is gone or stopped reading (after the payload's `exit` line);
// stderr is /dev/null by then. So the result is dropped, knowingly, here and only here.
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) (void)write_all(STATUS_FD, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

// A `warn WHAT ERRNO` line, at most once per WHAT per run (a failure in a 50 ms loop is
// reported once, not 60 times a second). `what` is one of a fixed set: a pointer compare.
static void warn_once(const char *what, int err) {
  static const char *told[16];
  for (size_t i = 0; i < sizeof told / sizeof *told && told[i]; i++)
    if (told[i] == what) return;
  for (size_t i = 0; i < sizeof told / sizeof *told; i++)
    if (!told[i]) {
      told[i] = what;
      break;
    }
  say("warn %s %d\n", what, err);
}

static long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) < 0 && errno == EINTR) {
  }
}

// A process's /proc/PID/stat, the one parser of it here (read_stat's and the sweep's sw_stat's):
// comm (field 2, between the first '(' and the LAST ')' — comm may hold spaces, parentheses,
// newlines), then the fields after that last ')': state (3), ppid (4), num_threads (20) and start
// time (22, clock ticks since boot). comm: up to 63 bytes, raw, NUL-terminated. 0, or -1 with
// errno: ENOENT or ESRCH (also for an empty read) when the process is gone — the only errnos that
// say so; EMFILE/ENFILE (no fd for the file), EINVAL (a line that does not parse) or another mean
// the stat could not be read, never that the process is not there.
struct proc_stat {
  pid_t ppid;
  char state;
  long threads;
  unsigned long long start;
  char comm[64];
  size_t commlen; // comm's bytes, as read (the kernel's comm holds no NUL)
};

static int read_proc_stat(pid_t pid, struct proc_stat *s) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int err = errno;
  close(fd);
  errno = n == 0 ? ESRCH : err;
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
  errno = EINVAL;
  if (!open_paren || !close_paren || close_paren < open_paren) return -1;
  // fields 3 (state) and 4 (ppid), 15 skipped (5..19), 20 (num_threads), 21 skipped, 22 (starttime)
  if (sscanf(close_paren + 1, " %c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %ld %*s %llu",
             &s->state, &s->ppid, &s->threads, &s->start) != 4)
    return -1;
  size_t len = (size_t)(close_paren - open_paren - 1);
  if (len >= sizeof s->comm) len = sizeof s->comm - 1;
  memcpy(s->comm, open_paren + 1, len);
  s->comm[len] = '\0';
  s->commlen = len;
  return 0;
}

// pid's ppid, state and start time (any may be NULL), as read_proc_stat reads them: 0, or -1
// with its errno.
static int read_stat(pid_t pid, pid_t *ppid, char *state, unsigned long long *start) {
  struct proc_stat s;
  if (read_proc_stat(pid, &s) < 0) return -1;
  if (ppid) *ppid = s.ppid;
  if (state) *state = s.state;
  if (start) *start = s.start;
  return 0;
}

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

static int pidfd_send_signal_(int fd, int sig) {
  return (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
}

enum sent { SENT, GONE, FAILED };

// 1 for the errnos by which /proc says a process is not there (ENOENT, ESRCH).
static int gone_errno(int err) { return err == ENOENT || err == ESRCH; }

// Signals pid only if it is still the process that started at `start`: pidfd_open, re-read
// the start time, pidfd_send_signal (race-free). Without a pidfd (ENOSYS: before Linux 5.3;
// EMFILE/ENFILE: no fd left) the start time is re-checked, then kill(2) — a narrow race. When
// the pidfd took the last fd, so that the stat cannot be opened beside it, the pidfd is closed
// and the same fallback is used: the one fd then serves the stat.
// GONE: ESRCH from any of the three, ENOENT for the stat, or another process now holds the pid
// (the start time differs): the one we meant has ended, which is what was asked. FAILED
// (errno kept): the start time could not be read (EMFILE, ENFILE…: it cannot be checked, so
// nothing is sent), EPERM (it changed uid beyond ours), or anything else the kernel refused.
static enum sent signal_identity(pid_t pid, unsigned long long start, int sig) {
  if (pid <= 1) return GONE;
  unsigned long long now;
  int fd = pidfd_open_(pid);
  if (fd < 0 && errno == ESRCH) return GONE;
  int rc = read_stat(pid, NULL, NULL, &now);
  if (rc < 0 && fd >= 0 && (errno == EMFILE || errno == ENFILE)) {
    close(fd);
    fd = -1;
    rc = read_stat(pid, NULL, NULL, &now);
  }
  enum sent result;
  if (rc < 0)
    result = gone_errno(errno) ? GONE : FAILED;
  else if (now != start)
    result = GONE;
  else {
    int sent = fd >= 0 ? pidfd_send_signal_(fd, sig) : kill(pid, sig);
    result = sent == 0 ? SENT : errno == ESRCH ? GONE : FAILED;
  }
  int err = errno;
  if (fd >= 0) close(fd);
  errno = err;
  return result;
}

// ---- the subtree -----------------------------------------------------------------------------

struct proc {
  pid_t pid, ppid;
  unsigned long long start;
  char state;
};

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const struct proc *)a)->pid, y = ((const struct proc *)b)->pid;
  return (x > y) - (x < y);
}

// One walk of /proc: every live descendant of the helper except the namespace's init. Returns
// how many were written to *out (malloc'd, sorted by pid), or -1 with errno when the walk is
// not whole: /proc cannot be opened or listed, memory runs out, or a process's stat cannot be
// read for any reason but its end (ENOENT/ESRCH: it exited meanwhile, skipped) — a process
// skipped for EMFILE would be a descendant left unsignalled while the walk looked complete.
// The listing is read whole and its directory closed before any stat is opened: the walk
// needs one fd at a time, so it works with a single fd free.
static int descendants(struct proc **out) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  size_t n = 0, cap = 256;
  struct proc *all = malloc(cap * sizeof *all);
  int err = all ? 0 : ENOMEM;
  while (!err) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      err = errno; // 0 at the end of the listing; readdir(3) failed otherwise
      break;
    }
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    if (n == cap) {
      struct proc *more = realloc(all, (cap *= 2) * sizeof *all);
      if (!more) {
        err = ENOMEM;
        break;
      }
      all = more;
    }
    all[n++] = (struct proc){.pid = (pid_t)pid};
  }
  closedir(d);
  size_t alive = 0;
  for (size_t i = 0; i < n && !err; i++) {
    struct proc p = all[i];
    if (read_stat(p.pid, &p.ppid, &p.state, &p.start) == 0)
      all[alive++] = p;
    else if (!gone_errno(errno))
      err = errno;
  }
  n = alive;
  if (err) {
    free(all);
    errno = err;
    return -1;
  }
  qsort(all, n, sizeof *all, by_pid);
  pid_t self = getpid();
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    // Follow the parent links up; a descendant reaches the helper. Depth bounded by n.
    struct proc key = all[i];
    int mine = 0;
    for (size_t depth = 0; depth <= n && key.ppid > 1; depth++) {
      if (key.ppid == self) {
        mine = 1;
        break;
      }
      struct proc *parent = bsearch(&(struct proc){.pid = key.ppid}, all, n, sizeof *all, by_pid);
      if (!parent) break;
      key = *parent;
    }
    if (mine && all[i].pid != ns_init && all[i].state != 'Z') all[kept++] = all[i];
  }
  *out = all;
  return (int)kept;
}

// Writes `text` to DIR/NAME. 0, or the errno of the open or the write.
static int write_file(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = write_all(fd, text, strlen(text)) < 0 ? errno : 0;
  close(fd);
  return err;
}

// ---- wrap mode: the completion lines ---------------------------------------------------------

// Reads one line from fd a byte at a time (nothing after its newline is consumed), EINTR asked
// again. Its length without the newline, NUL-terminated in buf (the newline's place); -1 on EOF or
// a read error before the newline; -2 for a line longer than size - 1 bytes.
static int read_line(int fd, char *buf, size_t size) {
  size_t used = 0;
  for (;;) {
    ssize_t n = read(fd, buf + used, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    if (buf[used] == '\n') break;
    if (++used == size) return -2;
  }
  buf[used] = '\0';
  return (int)used;
}

// 1 when a process traces this one (TracerPid in /proc/self/status is not 0), or when that
// cannot be read (errno kept: a tracer cannot be ruled out); 0 when none does. Asked once
// non-dumpable: a tracer that attached between the exec and the prctl is still attached, none
// can attach after it.
static int traced(void) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int err = errno;
  close(fd);
  errno = n < 0 ? err : EINVAL;
  if (n <= 0) return 1;
  buf[n] = '\0';
  const char *at = strstr(buf, "\nTracerPid:");
  if (!at) return 1;
  errno = EPERM;
  return atol(at + strlen("\nTracerPid:")) != 0;
}

// Writes `len` bytes on the stream, retried every 50 ms, up to 60 s, while a stdout the command
// left non-blocking is full (EAGAIN). 0, or -1 with errno (EPIPE: the stream is gone).
static int put_bytes(const char *text, size_t len) {
  for (int tries = 0; len > 0 && tries < 1200;) {
    ssize_t n = write(out_fd, text, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return -1;
    if (n > 0) {
      text += n; // a socket may take part of it
      len -= (size_t)n;
      continue;
    }
    tries++;
    sleep_ms(SCAN_INTERVAL_MS);
  }
  if (len > 0) errno = EAGAIN;
  return len > 0 ? -1 : 0;
}

// Writes one completion line on the stream as one write(2) (atomic on a pipe), as put_bytes.
static int put_line(const char *text) { return put_bytes(text, strlen(text)); }

// Before the payload starts, in wrap mode: waits for the shell's `checked` on the control pipe
// (it hashed the inode this process runs, after the exec: the bytes are the pushed helper's),
// refuses a tracer, then reads the nonce line from stdin — the stream's first line, NONCE (32 hex
// digits) — and prints `tether-start NONCE helper PID START[ cgroup][ await APID ASTART]` (START
// 0 when its stat was not read; APID ASTART its parent's, the --await process, when both were). 0, or -1 (said as `error WHAT ERRNO`; no
// line printed, nothing run): `checked` (another line, none within CHECKED_WAIT_MS — the shell
// was killed: the helper never reads EOF on a FIFO it holds itself — or a poll error),
// `traced`, `nonce` (none, or malformed: stderr says so as the wrapper does), `stdout`. Called
// before the signals are taken over: until the payload exists a TERM simply ends the helper.
static int wrap_begin(unsigned long long own_start) {
  char line[16];
  struct pollfd control = {.fd = CONTROL_FD, .events = POLLIN};
  int ready;
  while ((ready = poll(&control, 1, CHECKED_WAIT_MS)) < 0 && errno == EINTR) {
  }
  if (ready <= 0 || read_line(CONTROL_FD, line, sizeof line) != 7 || memcmp(line, "checked", 7) != 0) {
    say("error checked %d\n", ready < 0 ? errno : 0);
    return -1;
  }
  if (traced()) {
    say("error traced %d\n", errno);
    return -1;
  }
  if (read_line(0, nonce, sizeof nonce) != 32 || strspn(nonce, "0123456789abcdef") != 32) {
    explicit_bzero(nonce, sizeof nonce);
    fprintf(stderr, "tether-wrap: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i)\n");
    say("error nonce %d\n", EINVAL);
    return -1;
  }
  // The parent's identity too: the wrapper shell, exec'd into --await before it said `checked`
  // (same pid, same start time). A session member may stop it and kill this helper: nothing
  // would continue it then, and for a uid other than root no sweep would see it (non-dumpable,
  // its environ unreadable) unless tether names it.
  unsigned long long parent_start = 0;
  pid_t parent = getppid();
  char await_id[48] = "";
  if (parent > 1 && read_stat(parent, NULL, NULL, &parent_start) == 0 && parent_start > 0)
    snprintf(await_id, sizeof await_id, " await %d %llu", (int)parent, parent_start);
  char start[160];
  snprintf(start, sizeof start, "tether-start %s helper %d %llu%s%s\n", nonce, (int)getpid(), own_start,
           cgroup_dir ? " cgroup" : "", own_start > 0 ? await_id : "");
  int failed = (out_fd = fcntl(1, F_DUPFD_CLOEXEC, 10)) < 0 || put_line(start) < 0;
  explicit_bzero(start, sizeof start);
  if (failed) say("error stdout %d\n", errno);
  return failed ? -1 : 0;
}

static int has_children(void);
static int cgroup_populated(void);

// Wrap mode: the payload's end found the helper without a child, and its cgroup (if any) empty.
static int ended_childless;

// Once the payload is reaped, in wrap mode: `tether-end NONCE exit STATUS` (128+N for a signal N)
// right after everything it wrote, the nonce then zeroed and the stream's copy closed. With
// ` childless` after STATUS when the kernel says, right then, that the helper has no child — a
// subreaper without children has no descendant: nothing the command started is left below it —
// and its cgroup is not populated (docs/sandbox.md, "A childless end"); the helper then exits
// (supervise), and what the line says is a sweep's answer no session member can forge. The helper
// is dumpable again from here: nothing secret is left, and the sweep (without CAP_SYS_PTRACE) can
// read its environ once the wrapper, its parent, is gone. A line that cannot be written (the
// stream is gone, or full for 60 s) is lost: an unknown end, which tether sweeps.
static void wrap_end(int status) {
  if (out_fd < 0) return;
  int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  ended_childless = has_children() == 0 && !cgroup_populated();
  char end[96];
  snprintf(end, sizeof end, "tether-end %s exit %d%s\n", nonce, code, ended_childless ? " childless" : "");
  if (put_line(end) < 0) warn_once("end-line", errno);
  explicit_bzero(end, sizeof end);
  explicit_bzero(nonce, sizeof nonce);
  close(out_fd);
  out_fd = -1;
  prctl(PR_SET_DUMPABLE, 1);
}

// ---- reaping -------------------------------------------------------------------------------

// The payload's end on the status pipe; in wrap mode its end line first, so that the shell, which
// exits on this status, never ends the stream before the line is in it.
static void report_exit(int status) {
  wrap_end(status);
  // Wrap mode, nothing left below: ` childless` tells the --await process to wait for this
  // helper's exit (at once) before its own, so that when the exec ends the helper is gone.
  const char *childless = ended_childless ? " childless" : "";
  if (WIFSIGNALED(status))
    say("exit signal %d%s\n", WTERMSIG(status), childless);
  else
    say("exit code %d%s\n", WEXITSTATUS(status), childless);
  // Wrap mode: the --await process, our parent, exits on that line; one a process of the uid
  // stopped (SIGSTOP) would hold the exec's stream, and outlive the session, stopped.
  if (wrap && supervisor > 1 && getppid() == supervisor) kill(supervisor, SIGCONT);
}

// ---- the kept set ----------------------------------------------------------------------------

// The processes the supervisor's sweep keeps as declared services, by identity (`keep PID START`
// lines; docs/sweep.md, "Kept processes"): `children?` asks whether the helper has a child that
// is *not* one of them. An entry goes when its pid is reaped here (the pid is then free for
// another process). At most KEPT_MAX: past them (`kept_full`) the answer is `u`, never `n`.
#define KEPT_MAX 1024
static struct kept_id {
  pid_t pid;
  unsigned long long start;
} kept[KEPT_MAX];
static size_t nkept;
static int kept_full;

static int is_kept(pid_t pid, unsigned long long start) {
  for (size_t i = 0; i < nkept; i++)
    if (kept[i].pid == pid && kept[i].start == start) return 1;
  return 0;
}

static void keep_identity(pid_t pid, unsigned long long start) {
  if (pid <= 1 || is_kept(pid, start)) return;
  if (nkept == KEPT_MAX) {
    kept_full = 1;
    return;
  }
  kept[nkept++] = (struct kept_id){pid, start};
}

static void forget_kept(pid_t pid) {
  for (size_t i = 0; i < nkept;) {
    if (kept[i].pid == pid)
      kept[i] = kept[--nkept]; // the last entry takes its place, and is looked at next
    else
      i++;
  }
}

// Reaps every child that has ended; the payload's status goes to the supervisor. (With
// --pidns the payload is init's child: init reports its status on init_status_fd.) waitpid
// ends the loop with 0 (children left, none ended) or ECHILD (no child at all); EINTR cannot
// happen with WNOHANG, and EINVAL only with bad flags.
static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    forget_kept(pid);
    if (pid == payload && !pidns) {
      payload_reaped = 1;
      report_exit(status);
    }
    if (pid == ns_init) ns_init = -1;
  }
}

// 1 when the helper has a child, living or a zombie not yet reaped (waitid(2) with WNOWAIT
// only looks); 0 when it has none (ECHILD); -1 when the kernel would not say (any other errno:
// none is expected with these flags — the answer is then "cannot tell", never "none"). A
// subreaper without children has no descendants at all: this is the kernel's answer, exact
// even against a fork-and-exit loop that every /proc walk misses.
static int has_children(void) {
  reap();
  siginfo_t info;
  memset(&info, 0, sizeof info);
  if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0) return 1;
  return errno == ECHILD ? 0 : -1;
}

// 1 when the helper has a child that is not kept (living, or a zombie not yet reaped); 0 when
// it has none, or only kept ones; -1 when it cannot tell (no children list: a kernel without
// CONFIG_PROC_CHILDREN; no fd; more than KEPT_MAX kept or 64 KiB of children). The list is
// /proc/self/task/TID/children, read while nothing is reaped: a child stays listed, a zombie
// too, until this process reaps it, and a process adopted meanwhile had a parent that is listed
// (and not kept, unless it is a kept process's own child: part of the service). Each child is
// matched by identity (pid + start time): a kept pid reused by another process is not kept.
static int has_unkept_child(void) {
  static char list[65536];
  int has = has_children();
  if (has <= 0 || nkept == 0) return has;
  if (kept_full) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  ssize_t n;
  while ((n = read(fd, list + got, sizeof list - 1 - got)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) got += (size_t)n;
  close(fd);
  if (n < 0 || got == sizeof list - 1) return -1;
  list[got] = '\0';
  for (char *p = list, *end;; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p) return 0; // the end of the list: every child is kept
    unsigned long long start;
    if (read_stat((pid_t)pid, NULL, NULL, &start) < 0) return -1; // our unreaped child: readable
    if (!is_kept((pid_t)pid, start)) return 1;
  }
}

// The cgroup still holds a process (cgroup.events "populated 1"); false without a cgroup, or
// once it is gone (ENOENT). A cgroup.events that cannot be read (EMFILE…) counts as populated:
// "cannot tell" is never "empty".
static int cgroup_populated(void) {
  if (!cgroup_dir) return 0;
  char path[4096], buf[256];
  snprintf(path, sizeof path, "%s/cgroup.events", cgroup_dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = '\0';
  return strstr(buf, "populated 1") != NULL;
}

// ---- the dead man's switch ------------------------------------------------------------------

// 1 for the errnos that say no fd could be had: this process's limit (EMFILE), the system's (ENFILE).
static int no_fd(int err) { return err == EMFILE || err == ENFILE; }

// The fds the dead man's switch can do without, closed the first time it finds no fd left for
// a walk of /proc, cgroup.kill or the cgroup's removal (which then are tried again): fds 0-2
// (/dev/null since the payload's start: nothing is written there), the signalfd (the switch
// reads no signal: SIGCHLD stays blocked and waitpid reaps), the answer pipe (the switch
// answers no `children?`: a living supervisor reads EOF, no proof — what it assumes then) and
// the control pipe (at EOF; after a SIGTERM never read again: the helper exits after the
// switch). They are six fd numbers, three of them the lowest: under any RLIMIT_NOFILE of 1 or
// more (the limit bounds fd numbers), and on ENFILE (these free six of the system's entries),
// the one-fd-at-a-time walk then has its fd. Returns 1 when it closed them, 0 on a later call.
static int free_spare_fds(void) {
  static int freed;
  if (freed) return 0;
  freed = 1;
  const int spare[] = {0, 1, 2, CONTROL_FD, ANSWER_FD, sfd};
  for (size_t i = 0; i < sizeof spare / sizeof *spare; i++)
    if (spare[i] >= 0) close(spare[i]);
  sfd = -1;
  return 1;
}

// Removes a cgroup and every (empty) cgroup below it, depth first; EBUSY retried briefly (a
// cgroup stays populated for a moment after its last process is killed).
static void remove_cgroup(const char *dir) {
  DIR *d = opendir(dir);
  if (!d && no_fd(errno) && free_spare_fds()) d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
      char sub[4096];
      snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
      remove_cgroup(sub);
    }
    closedir(d);
  }
  for (int i = 0; i < 20; i++) {
    if (rmdir(dir) == 0 || errno == ENOENT) return;
    if (errno != EBUSY) break;
    sleep_ms(10);
  }
  warn_once("rmdir", errno); // EBUSY still populated after 200 ms, EACCES, EROFS…
}

// End the subtree as the supervisor's sweep would have. TERM each descendant once (SIGCONT
// after it, for a stopped one), rescan every 50 ms until the subtree is empty — by the kernel's
// word: no child left (without --pidns); with --pidns, two walks in a row that find nothing but
// init — or the grace is spent; then the same with KILL up to kill_after_ms. Killing a --pidns
// init ends its namespace. `whole_session` (the supervisor is gone, so is the session): the
// session's cgroup counts too — cgroup.kill in the KILL phase, `populated 0` to be empty, and
// removed at the end. Without it (a SIGTERM from an outer sweep or a user) the cgroup, shared
// with the session's other commands, is left alone.
// TERM (or KILL) one descendant by identity; SIGCONT after a TERM to a stopped one. GONE is
// fine; a FAILED signal is said (`warn signal ERRNO PID`) and the rounds go on: the process is
// then a survivor the supervisor's report (if it still runs) or the cgroup.kill may still end.
static void end_one(const struct proc *p, int sig) {
  if (signal_identity(p->pid, p->start, sig) == FAILED) say("warn signal %d %d\n", errno, p->pid);
  if (sig == SIGTERM && (p->state == 'T' || p->state == 't')) signal_identity(p->pid, p->start, SIGCONT);
}

// cgroup.kill of the session's cgroup (whole_session only). ENOENT: the cgroup is gone, so is
// everything in it: done. Another errno (EMFILE, EACCES, EROFS, ENODEV before Linux 5.14) is
// said once (`warn cgroup-kill ERRNO`); the per-process KILLs go on.
static void kill_cgroup(void) {
  int err = write_file(cgroup_dir, "cgroup.kill", "1");
  if (no_fd(err) && free_spare_fds()) err = write_file(cgroup_dir, "cgroup.kill", "1");
  if (err && err != ENOENT) warn_once("cgroup-kill", err);
}

// A walk of /proc that failed, also after free_spare_fds (EMFILE under a limit of 0, ENOMEM, no
// /proc, a stat unreadable for another reason than its process's end): said once (`warn scan
// ERRNO`), and
// the payload is still signalled — the one descendant the helper can name without /proc:
// through the pidfd held since its go, or, when that pidfd_open failed too (the fds were
// already gone), by kill(2) on its pid, which cannot name another process while the payload is
// our unreaped child. Orphans then wait for the kernel: cgroup.kill, or (--pidns) init's death.
static void end_payload_blind(int sig) {
  warn_once("scan", errno);
  if (payload_reaped || payload <= 1) return;
  int rc = payload_pidfd >= 0 ? pidfd_send_signal_(payload_pidfd, sig) : kill(payload, sig);
  if (rc < 0 && errno != ESRCH) say("warn signal %d %d\n", errno, payload);
}

static void dead_mans_switch(int whole_session) {
  static const int phase_signal[2] = {SIGTERM, SIGKILL};
  long budget[2] = {grace_ms, kill_after_ms};
  struct proc *told = NULL; // processes already sent this phase's signal
  size_t ntold = 0;
  for (int phase = 0; phase < 2; phase++) {
    int sig = phase_signal[phase], empty = 0;
    long deadline = now_ms() + budget[phase];
    ntold = 0;
    for (;;) {
      if (sig == SIGKILL && whole_session && cgroup_dir) kill_cgroup();
      struct proc *list = NULL;
      int n = descendants(&list);
      if (n < 0 && no_fd(errno) && free_spare_fds()) n = descendants(&list);
      if (n < 0) end_payload_blind(sig);
      for (int i = 0; i < n; i++) {
        int seen = 0;
        for (size_t j = 0; j < ntold && !seen; j++)
          seen = told[j].pid == list[i].pid && told[j].start == list[i].start;
        if (seen) continue;
        end_one(&list[i], sig);
        struct proc *more = realloc(told, (ntold + 1) * sizeof *told);
        if (more) (told = more)[ntold++] = list[i];
      }
      free(list);
      reap();
      if (!pidns) {
        // has_children() -1 (cannot tell) counts as a child: never "empty" without the kernel.
        if (n <= 0 && has_children() == 0 && !(whole_session && cgroup_populated())) empty = 2;
      } else {
        empty = n == 0 ? empty + 1 : 0;
      }
      if (empty >= 2) break;
      if (now_ms() >= deadline) break;
      sleep_ms(SCAN_INTERVAL_MS);
    }
    if (empty >= 2) break;
  }
  free(told);
  // The namespace's init is our own unreaped child (ns_init is cleared when it is reaped): its
  // pid cannot name another process, and the kernel ends the rest of the namespace with it.
  if (ns_init > 0) kill(ns_init, SIGKILL);
  reap();
  if (whole_session && cgroup_dir) {
    remove_cgroup(cgroup_dir);
    // Wrap mode: removed once. A later wrapper of the same pid may make one of the same name,
    // which is not this helper's to remove (remove_own_cgroup at exit).
    if (wrap) cgroup_dir = NULL;
  }
}

// ---- starting the payload -------------------------------------------------------------------

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define CLONE_INTO_CGROUP_ 0x200000000ULL

// clone3(2)'s argument, as of Linux 5.7 (struct clone_args).
struct clone_args_ {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};

// fork(2), with the child born in the cgroup whose directory `cgroup_fd` is open
// (clone3(2) CLONE_INTO_CGROUP, Linux 5.7): no migration of a running task, which costs an
// RCU grace period (~15 ms) when the kernel's cgroup_threadgroup_rwsem has been idle. *joined
// says whether it happened; without it (an older kernel) the child joins by writing
// cgroup.procs before exec. Only for a child that execs or _exits: glibc's fork bookkeeping is
// skipped.
static pid_t fork_into(int cgroup_fd, int *joined) {
  *joined = 0;
  if (cgroup_fd >= 0) {
    struct clone_args_ args = {.flags = CLONE_INTO_CGROUP_, .exit_signal = SIGCHLD, .cgroup = (uint64_t)cgroup_fd};
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) {
      *joined = 1;
      return (pid_t)pid;
    }
  }
  return fork();
}

// execvp(3) as POSIX has it, in the forked child (the payload's here, a resident call's in
// helper-serve.c): `cmd[0]` searched on PATH (musl's default where it is unset) unless it holds a
// `/`, and a file the kernel will not exec as it is (ENOEXEC: an executable without `#!`) run as
// `sh FILE ARGS…` by /bin/sh, as glibc's execvp, timeout(1) and a shell run it — musl's stops
// there with ENOEXEC (a break attempt: 126 where the wrapper ran the file; `tether run -- ./f`
// said `spawn ./f ENOEXEC`). A file found but not executable is passed over, its EACCES kept for
// the end; an empty name is ENOENT, as execvp says. Returns only on failure, errno set.
static void exec_search(char **cmd) {
  extern char **environ;
  size_t argc = 0;
  while (cmd[argc]) argc++;
  if (!cmd[0][0]) {
    errno = ENOENT;
    return;
  }
  const char *path = strchr(cmd[0], '/') ? "" : getenv("PATH");
  if (!path) path = "/usr/local/bin:/bin:/usr/bin";
  int seen_eacces = 0;
  char file[4096];
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    const char *name = cmd[0];
    if (!strchr(cmd[0], '/')) {
      int n = snprintf(file, sizeof file, "%.*s%s%s", (int)len, p, len ? "/" : "", cmd[0]);
      if (n < 0 || (size_t)n >= sizeof file) {
        errno = ENAMETOOLONG;
        goto next;
      }
      name = file;
    }
    execve(name, cmd, environ);
    if (errno == ENOEXEC) {
      char **sh = calloc(argc + 2, sizeof *sh);
      if (!sh) return;
      sh[0] = "sh";
      sh[1] = (char *)name;
      for (size_t i = 1; i < argc; i++) sh[i + 1] = cmd[i];
      execve("/bin/sh", sh, environ);
      return;
    }
    if (errno == EACCES) seen_eacces = 1;
    else if (errno != ENOENT && errno != ENOTDIR) return;
  next:
    if (strchr(cmd[0], '/') || !colon) break;
    p = colon + 1;
  }
  if (seen_eacces) errno = EACCES;
}

// In the child, before exec: join the session's cgroup (so no early fork escapes it), restore
// the signal mask and dispositions the helper changed, wait for the go byte, exec. The go byte
// comes once the helper has reported "started" and the supervisor has answered "go" (it holds
// the payload's pidfd): a command that kills its helper at once can never leave the supervisor
// believing it never ran, and a payload that exits at once cannot free its pid before the
// supervisor holds it. No go byte (the helper died, the supervisor never said go): no exec.
// A failure is written to err_fd as two ints (stage, errno); the child then exits 127.
static void exec_payload(char **argv, int procs_fd, int err_fd, int go_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  int stage = 1;
  if (procs_fd >= 0 && write(procs_fd, "0", 1) != 1) goto fail;
  char go;
  ssize_t n;
  while ((n = read(go_fd, &go, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) _exit(125); // EOF: the helper never wrote it (died, or the supervisor said no)
  close(go_fd);
  stage = 2;
  exec_search(argv);
fail:;
  int msg[2] = {stage, errno};
  (void)write_all(err_fd, (const char *)msg, sizeof msg); // EPIPE: the helper is gone too
  _exit(127);
}

// poll(2) on `fds`, EINTR asked again. Another errno (EINVAL: RLIMIT_NOFILE was lowered below
// the fds polled, as prlimit(1) can do from outside; ENOMEM) must not end the loop — that
// would run the dead man's switch on a supervisor that is alive. The caller is told (-1, errno
// kept) once; from then on every call waits SCAN_INTERVAL_MS and marks each fd readable: the
// loop reads them all, non-blocking, every 50 ms instead of when they are ready.
static int poll_or_tick(struct pollfd *fds, nfds_t n, int *degraded) {
  if (!*degraded) {
    int rc;
    while ((rc = poll(fds, n, -1)) < 0 && errno == EINTR) {
    }
    if (rc >= 0) return rc;
    int err = errno;
    *degraded = 1;
    for (nfds_t i = 0; i < n; i++)
      if (fds[i].fd >= 0) fcntl(fds[i].fd, F_SETFL, fcntl(fds[i].fd, F_GETFL) | O_NONBLOCK);
    errno = err;
    return -1;
  }
  sleep_ms(SCAN_INTERVAL_MS);
  for (nfds_t i = 0; i < n; i++) fds[i].revents = fds[i].fd >= 0 ? POLLIN : 0;
  return (int)n;
}

// --pidns: init of the new namespace. It mounts its own /proc, starts the payload, reaps
// every orphan, and sends the payload's raw wait status on status_fd. It stays until its
// parent's pipe (hold_fd) closes, then exits: the kernel kills what is left in the namespace.
static void run_init(char **argv, int procs_fd, int err_fd, int go_fd, int status_fd, int hold_fd) {
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
    int msg[2] = {3, errno};
    (void)write_all(err_fd, (const char *)msg, sizeof msg);
    _exit(127);
  }
  pid_t child = fork();
  if (child < 0) {
    int msg[2] = {2, errno}; // reported as `exec-failed exec ERRNO` (EAGAIN: no process left)
    (void)write_all(err_fd, (const char *)msg, sizeof msg);
    _exit(127);
  }
  if (child == 0) exec_payload(argv, procs_fd, err_fd, go_fd);
  // Init holds nothing of the payload's or the supervisor's: not its stdio, not the pipes.
  close(err_fd);
  close(go_fd);
  if (procs_fd >= 0) close(procs_fd);
  close(STATUS_FD);
  close(CONTROL_FD);
  close(ANSWER_FD);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; fd++) dup2(null, fd);
  close(null);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  // SIGCHLD is still blocked (inherited mask). Without a signalfd (EMFILE) init still reaps:
  // poll then has only hold_fd, and fails over to the 50 ms tick when it cannot wait either.
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  struct pollfd fds[2] = {{.fd = sfd, .events = POLLIN}, {.fd = hold_fd, .events = POLLIN}};
  int degraded = sfd < 0;
  if (degraded) fcntl(hold_fd, F_SETFL, fcntl(hold_fd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
      if (pid == child) (void)write_all(status_fd, (const char *)&status, sizeof status);
    // init has no status line of its own to say a poll failure on: it is handled, not said.
    poll_or_tick(fds, 2, &degraded);
    if (fds[0].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
      }
    }
    if (fds[1].revents) {
      char byte;
      ssize_t n = read(hold_fd, &byte, 1);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      _exit(0); // EOF (or an error on it): the helper released us, or died
    }
  }
}

// --pidns: the payload's pid in the supervisor's namespace is found as init's only child (it
// waits for the go byte before exec). Gives up when init reports a failure on err_fd, or 2 s.
// A walk that fails (descendants() -1: EMFILE, ENOMEM) is tried again within the same bound.
static int find_payload(unsigned long long *start, int err_fd) {
  for (int tries = 0; tries < 2000; tries++) {
    struct pollfd failed = {.fd = err_fd, .events = POLLIN};
    if (poll(&failed, 1, 0) > 0) return -1;
    struct proc *list = NULL;
    int n = descendants(&list);
    for (int i = 0; i < n; i++) {
      if (list[i].ppid == ns_init) {
        payload = list[i].pid;
        *start = list[i].start;
        free(list);
        return 0;
      }
    }
    free(list);
    sleep_ms(1);
  }
  return -1;
}

// Waits for the supervisor's "go" line on the control pipe, read a byte at a time so that
// nothing after it is consumed. 0 on "go"; 1 on EOF (the supervisor died) or a read error
// other than EINTR (the pipe cannot tell us anything any more: treated as EOF); -1 on another
// line.
static int await_go(void) {
  char line[8];
  int n = read_line(CONTROL_FD, line, sizeof line);
  if (n == -1) return 1;
  return n == 2 && !memcmp(line, "go", 2) ? 0 : -1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: tether-helper [--wrap] [--name PATH] [--grace MS] [--kill-after MS] [--cgroup DIR] [--pidns] -- CMD [ARG...]\n"
          "  run by tether with a status pipe on fd 3 and a control pipe on fd 4\n");
  exit(125);
}

// ---- the loop's steps ------------------------------------------------------------------------

static int init_status_fd = -1;

// The helper leaves the caller's process group for one of its own (setpgid(2): pgid = its pid);
// the payload, forked before this, keeps the caller's group. A signal to the caller's group —
// Playwright's `webServer` SIGKILLs the process group of `tether run`, a shell's `kill -9 %1` —
// then reaches the supervisor and the payload but not the helper, whose dead man's switch
// ends what they leave (EOF on the control pipe). Called after the fork, so the payload never
// moves: it inherits the caller's group whether or not that group's leader still exists (a
// setpgid(child, pgid) toward the caller's group would need a live member, and would race the
// child's exec), and it stays in the terminal's foreground group when the caller is there.
// A helper that already leads a group (started as one) has nothing to do. Errno: EPERM when it
// leads a POSIX session (then it leads its group too: not reached); any other is said
// (`warn setpgid ERRNO`) and the helper stays in the caller's group, which can kill it.
static void leave_callers_group(void) {
  if (getpgrp() == getpid()) return;
  if (setpgid(0, 0) < 0) say("warn setpgid %d\n", errno);
}

// --pidns: the namespace's init into the helper's group, once it has forked the payload (which
// keeps the caller's group, inherited from init). The init never execs, so setpgid(2) on it is
// allowed. ESRCH: init is gone (killed), and the kernel ended its namespace: nothing to move.
// Another errno is said (`warn setpgid ERRNO PID`): init then dies with the caller's group,
// and the kernel ends its namespace with it — SIGKILL at once, the grace lost.
static void move_init_to_own_group(void) {
  if (setpgid(ns_init, getpgrp()) < 0 && errno != ESRCH) say("warn setpgid %d %d\n", errno, ns_init);
}

// Forwards one signal the supervisor sent to the payload. ESRCH: the payload has ended (its
// `exit` line follows); another errno (EPERM: it gained privileges by a set-uid exec) is said.
static void forward(int sig) {
  if (payload_reaped) return;
  int rc = payload_pidfd >= 0 ? pidfd_send_signal_(payload_pidfd, sig) : payload > 1 ? kill(payload, sig) : 0;
  if (rc < 0 && errno != ESRCH) say("warn forward %d %d\n", errno, payload);
}

// Step 1: the signals. SIGCHLD reaps; the supervisor's signals are forwarded; a SIGTERM from
// anyone else ends the subtree (returns 1: the helper then exits). EAGAIN ends the batch.
static int on_signals(void) {
  struct signalfd_siginfo si;
  while (read(sfd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGCHLD) continue;
    // A terminal's signal (si_code SI_KERNEL) reached the payload's process group already
    // (the helper is in a group of its own, so one reaches it only if setpgid failed).
    if (si.ssi_code != SI_USER && si.ssi_code != SI_QUEUE) continue;
    // SIGTERM from anyone but our supervisor (an outer session's sweep, a user's kill):
    // end the whole subtree as the supervisor's sweep would, then exit.
    // In wrap mode the cgroup (--cgroup) is this helper's own, made for its payload by the
    // wrapper: it is killed, waited for and removed with the subtree.
    if (si.ssi_signo == SIGTERM && (pid_t)si.ssi_pid != supervisor) {
      dead_mans_switch(wrap);
      return 1;
    }
    // The supervisor's kill() goes to the payload. Another process's signal sent to a
    // whole process group (a shell's `kill -INT %1`) reached the payload already.
    if ((pid_t)si.ssi_pid == supervisor) forward((int)si.ssi_signo);
  }
  reap();
  return 0;
}

// Step 2 (--pidns): init's report of the payload's wait status. EOF (or an error on the pipe):
// init is gone — killed — and the kernel killed its namespace: the status is lost. Returns 1
// when the pipe is done.
static int on_init_status(void) {
  int status;
  ssize_t n = read(init_status_fd, &status, sizeof status);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n == sizeof status) {
    payload_reaped = 1;
    report_exit(status);
    return 0;
  }
  if (!payload_reaped) {
    payload_reaped = 1;
    say("exit lost\n");
  }
  return 1;
}

// Answers `children? K` on the answer pipe: has a child that is not kept (`c`), has none but
// kept ones (`n`), cannot tell (`u`). A write that fails is dropped: EAGAIN (the
// supervisor left earlier answers unread: it gave up on them after its bound and will
// on this one), EPIPE (it closed the pipe: released us), EBADF (it gave no answer pipe) — each
// leaves the supervisor without a proof, which is what it then assumes.
static void answer(unsigned long k) {
  int has = pidns ? -1 : has_unkept_child();
  char line[32];
  int len = snprintf(line, sizeof line, "%lu %c\n", k, has == 0 ? 'n' : has > 0 ? 'c' : 'u');
  (void)write_all(ANSWER_FD, line, (size_t)len);
}

// Step 3: the control pipe. Returns 1 on `release`, -1 when the supervisor is gone (EOF, or a
// read error other than EINTR/EAGAIN: said first), 0 otherwise. Unknown lines are ignored; a
// line longer than the buffer is dropped.
static int on_control(void) {
  static char control[256];
  static size_t used;
  ssize_t n = read(CONTROL_FD, control + used, sizeof control - 1 - used);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n < 0) warn_once("control", errno);
  if (n <= 0) return -1;
  used += (size_t)n;
  control[used] = '\0';
  char *line = control, *nl;
  while ((nl = strchr(line, '\n'))) {
    *nl = '\0';
    // Wrap mode takes none of these: the wrapper sends only `checked` and `go`, and its control
    // FIFO can be opened by any process of the uid while its name exists — a `release` from one
    // would end the helper without its dead man's switch, leaving what it held to the container's
    // init (found by a break attempt).
    if (wrap) {
      line = nl + 1;
      continue;
    }
    if (!strcmp(line, "release")) return 1;
    unsigned long k;
    int pid;
    unsigned long long start;
    if (sscanf(line, "children? %lu", &k) == 1) answer(k);
    else if (sscanf(line, "keep %d %llu", &pid, &start) == 2) keep_identity(pid, start);
    line = nl + 1;
  }
  used = strlen(line);
  memmove(control, line, used + 1);
  if (used == sizeof control - 1) used = 0; // a line this long is not ours: drop it
  return 0;
}

// Steps 1 and 2: the subreaper mark and the signalfd. -1 when either failed (said).
static int become_subreaper(void) {
  // 1. Subreaper: every orphan of the payload's subtree is reparented here, not to PID 1.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    say("error subreaper %d\n", errno);
    return -1;
  }
  // 2. Every signal that can be caught arrives on a signalfd: SIGCHLD to reap, the rest to
  // forward (when the supervisor sent them) or to drop. So no signal stops or ends the helper
  // by its default action: a terminal's SIGTSTP/SIGTTIN, a forwarded SIGIO or SIGPWR, a
  // real-time signal. (Only SIGKILL and SIGSTOP reach it; the faults stay unblocked.)
  sigset_t set;
  sigfillset(&set);
  static const int unblocked[] = {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t k = 0; k < sizeof unblocked / sizeof *unblocked; k++) sigdelset(&set, unblocked[k]);
  sigprocmask(SIG_BLOCK, &set, NULL);
  sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    say("error signalfd %d\n", errno);
    return -1;
  }
  return 0;
}

// The pipes between the helper and its child once the child is forked: the go byte's writer,
// the child's failure report's reader, and (--pidns) init's status reader.
struct child_pipes {
  int go, err, init_status;
};

// Steps 3 to 6: the cgroup, the child (the payload, or with --pidns the namespace's init, which
// starts it), out of the caller's group, the stdio handed over, `started`. 0, or -1 when the
// payload cannot be started (said as `error WHAT ERRNO`; the child, if any, never execs).
static int start_payload(char **cmd, struct child_pipes *out) {
  // 3. The session's cgroup, opened before the fork: the child is born in it (clone3) or joins
  // it before exec. (Without the directory's fd — EMFILE — the child joins by cgroup.procs.)
  int procs_fd = -1, cgroup_fd = -1;
  if (cgroup_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroup_dir);
    if ((procs_fd = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
      say("error cgroup %d\n", errno);
      return -1;
    }
    cgroup_fd = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  int err_pipe[2], go_pipe[2] = {-1, -1}, init_status[2] = {-1, -1}, hold[2] = {-1, -1};
  // 4. Start the payload (--pidns: start the namespace's init, which starts the payload).
  if (pipe2(err_pipe, O_CLOEXEC) < 0 || pipe2(go_pipe, O_CLOEXEC) < 0 ||
      (pidns && (pipe2(init_status, O_CLOEXEC) < 0 || pipe2(hold, O_CLOEXEC) < 0))) {
    say("error pipe %d\n", errno);
    return -1;
  }
  if (pidns && unshare(CLONE_NEWPID) < 0) {
    say("error unshare %d\n", errno);
    return -1;
  }
  int joined = 0;
  pid_t child = pidns ? fork() : fork_into(cgroup_fd, &joined);
  if (child < 0) {
    say("error fork %d\n", errno);
    return -1;
  }
  if (child == 0) {
    close(go_pipe[1]);
    if (wrap) close(out_fd); // the payload has the stream as its own stdout
    if (!pidns) exec_payload(cmd, joined ? -1 : procs_fd, err_pipe[1], go_pipe[0]);
    close(init_status[0]);
    close(hold[1]);
    close(sfd);
    run_init(cmd, procs_fd, err_pipe[1], go_pipe[0], init_status[1], hold[0]);
  }
  close(err_pipe[1]);
  if (procs_fd >= 0) close(procs_fd);
  if (cgroup_fd >= 0) close(cgroup_fd);
  // 5. Out of the caller's process group, before `started`: from the supervisor's `go` on, a
  // kill of that group leaves the helper alive to end the session.
  leave_callers_group();
  // 6. Hand the payload's stdio over: from here the helper holds none of it (in wrap mode, a
  // copy of stdout for the end line only, closed once that is written).
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; fd++) dup2(null, fd);
  close(null);
  close(go_pipe[0]);
  *out = (struct child_pipes){.go = go_pipe[1], .err = err_pipe[0], .init_status = init_status[0]};
  unsigned long long start = 0;
  if (!pidns) {
    payload = child;
    // Our unreaped child: its stat is readable unless /proc is not (or no fd is left).
    if (read_stat(payload, NULL, NULL, &start) < 0) {
      say("error stat %d\n", errno);
      close(go_pipe[1]); // the child reads EOF and exits 125 without exec
      reap();
      return -1;
    }
    say("started %d %llu\n", payload, start);
    return 0;
  }
  close(init_status[1]);
  close(hold[0]);
  ns_init = child;
  unsigned long long init_start = 0;
  if (read_stat(ns_init, NULL, NULL, &init_start) < 0) {
    say("error stat %d\n", errno);
    kill(ns_init, SIGKILL); // our own unreaped child
    reap();
    return -1;
  }
  say("init %d %llu\n", ns_init, init_start);
  if (find_payload(&start, err_pipe[0]) < 0) {
    // init could not set up the namespace (its /proc mount refused: a masked /proc).
    int failed[2] = {0, 0};
    (void)!read(err_pipe[0], failed, sizeof failed);
    say("error namespace %d\n", failed[1]);
    kill(ns_init, SIGKILL);
    reap();
    return -1;
  }
  move_init_to_own_group();
  say("started %d %llu\n", payload, start);
  return 0;
}

// After the supervisor's `go`: the go byte to the child, then the child's exec failure, if any.
static void let_payload_go(struct child_pipes *p) {
  // EPIPE: the child is gone already (killed before its go); its reap reports how it ended.
  (void)write_all(p->go, "g", 1);
  close(p->go);
  int msg[2];
  ssize_t got;
  while ((got = read(p->err, msg, sizeof msg)) < 0 && errno == EINTR) {
  }
  if (got == sizeof msg) {
    say("exec-failed %s %d\n", msg[0] == 1 ? "cgroup" : msg[0] == 3 ? "namespace" : "exec", msg[1]);
  }
  close(p->err);
  // Without the payload's pidfd (EMFILE; ENOSYS before Linux 5.3) forward() uses kill(2).
  if (payload > 0) payload_pidfd = pidfd_open_(payload);
  init_status_fd = p->init_status;
}

// 7. The loop: reap, forward, report, answer, until the supervisor releases us (0) or goes
// away (the dead man's switch, then 0).
static int supervise(void) {
  struct pollfd fds[3] = {{.fd = sfd, .events = POLLIN},
                          {.fd = CONTROL_FD, .events = POLLIN},
                          {.fd = init_status_fd, .events = POLLIN}};
  int degraded = 0;
  for (;;) {
    if (ended_childless) return 0; // wrap mode: nothing is left to hold (wrap_end)
    if (poll_or_tick(fds, pidns ? 3 : 2, &degraded) < 0) warn_once("poll", errno);
    if (fds[0].revents && on_signals()) return 0;
    if (pidns && fds[2].revents && on_init_status()) fds[2].fd = -1;
    if (fds[1].revents) {
      int said = on_control();
      if (said > 0) return 0; // released
      if (said < 0) break;    // EOF: the supervisor died
    }
  }
  dead_mans_switch(1);
  return 0;
}

// The options before `--`; returns CMD. Usage (exit 125) on anything else or a missing pipe.
static char **parse_args(int argc, char **argv) {
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (!strcmp(argv[i], "--grace") && i + 1 < argc)
      grace_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--kill-after") && i + 1 < argc)
      kill_after_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--cgroup") && i + 1 < argc)
      cgroup_dir = argv[++i];
    else if (!strcmp(argv[i], "--pidns"))
      pidns = 1;
    else if (!strcmp(argv[i], "--wrap") && i == 1)
      wrap = 1;
    else if (!strcmp(argv[i], "--name") && i + 1 < argc)
      i++; // the file the shell pinned and ran as /proc/PID/fd/N: for ps and the report only
    else
      usage();
  }
  if (i + 1 >= argc || fcntl(STATUS_FD, F_GETFD) < 0 || fcntl(CONTROL_FD, F_GETFD) < 0) usage();
  return argv + i + 1;
}

// Wrap mode, at exit: rmdir(2) of the helper's own cgroup, which succeeds only once it is empty
// (EBUSY otherwise: what is left in it stays for the session's sweep).
static void remove_own_cgroup(void) {
  if (cgroup_dir) (void)rmdir(cgroup_dir);
}

// ---- await mode: the wrapper's last step ----------------------------------------------------

// --await HPID (first; wrap.sh, docs/sandbox.md "No dumpable wrapper"): the completion wrapper
// shell execs this, from the inode it pinned and hashed, once its child the helper (HPID, in wrap
// mode) has been exec'd and hashed again. The shell was the one session process outside the
// helper's subtree: dumpable, a process of its uid could trace it (where Yama allows) and make it
// start what no helper holds. This process takes its place — the same pid, so the exec channel's
// stream stays open until the command's end — and is non-dumpable before it does anything. Then it
// refuses a tracer that attached before the prctl (the helper is KILLed: it has not been given the
// nonce, nothing ran), writes `checked` and `go` to the helper's control FIFO (fd AWAIT_CONTROL_FD),
// and reads its status FIFO (fd AWAIT_STATUS_FD) until the payload's `exit` line; it exits with the
// command's status (128+N for a signal N), the end line already in the stream (the helper writes
// it first). A helper that stops (SIGSTOP from a process of the session's uid) is continued: a
// stopped helper would hold the call. EOF without `exit`: the helper is gone without the command's
// status, which stderr says; 125, an unknown end that tether sweeps. HUP, INT and TERM are not
// its to act on (the shell's traps waited on too): the helper and its payload get their own.
#define AWAIT_STATUS_FD 5
#define AWAIT_CONTROL_FD 6

// The status the shell would exit with for one `exit` line's words, or -1 when it is not one;
// *childless when the line ends ` childless` (report_exit).
static int exit_status_of(const char *line, int *childless) {
  char how[8];
  int n, end = 0;
  if (sscanf(line, "exit %7s %d%n", how, &n, &end) != 2 || n < 0 || n > 255) return -1;
  *childless = !strcmp(line + end, " childless");
  if (line[end] != '\0' && !*childless) return -1;
  if (!strcmp(how, "code")) return n;
  if (!strcmp(how, "signal")) return n > 127 ? 125 : 128 + n;
  return -1;
}

// Continues the helper when it is stopped; 1 once it has exited (reaped here, or before: ECHILD),
// else 0.
static int helper_stopped_or_gone(pid_t helper) {
  int status;
  pid_t got = waitpid(helper, &status, WNOHANG | WUNTRACED);
  if (got < 0) return errno == ECHILD;
  if (got == helper && WIFSTOPPED(status)) kill(helper, SIGCONT);
  return got == helper && (WIFEXITED(status) || WIFSIGNALED(status));
}

static int await_helper(int argc, char **argv) {
  int dumpable_err = prctl(PR_SET_DUMPABLE, 0) < 0 ? errno : 0;
  long hpid = argc > 2 ? atol(argv[2]) : 0;
  const char *name = argc > 3 ? argv[3] : "the helper";
  if (hpid <= 1 || fcntl(AWAIT_STATUS_FD, F_GETFD) < 0 || fcntl(AWAIT_CONTROL_FD, F_GETFD) < 0) {
    fprintf(stderr, "usage: tether-helper --await HPID [NAME] (status FIFO on fd 5, control FIFO on fd 6)\n");
    return 125;
  }
  pid_t helper = (pid_t)hpid;
  signal(SIGPIPE, SIG_IGN);
  // Nothing of the stream's stdin is ours (the helper reads the nonce, the payload the rest): not
  // fd 0, not the shell's copy on fd 3; nor the pinned inode on fd 9 (the helper runs it).
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) dup2(null, 0), close(null);
  close(3);
  close(7);
  close(8);
  close(9);
  if (dumpable_err || traced()) {
    kill(helper, SIGKILL);
    fprintf(stderr, "tether-wrap: the wrapper could not make itself untraceable (%s): the command was not run\n",
            dumpable_err ? "prctl" : "a tracer was attached");
    return 125;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int chld = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (write_all(AWAIT_CONTROL_FD, "checked\ngo\n", 11) < 0) {
    kill(helper, SIGKILL);
    fprintf(stderr, "tether-wrap: %s could not be told to start (%s): the command was not run\n", name, strerror(errno));
    return 125;
  }
  close(AWAIT_CONTROL_FD);
  char buf[512], said[96] = "";
  size_t used = 0;
  struct pollfd fds[2] = {{.fd = AWAIT_STATUS_FD, .events = POLLIN}, {.fd = chld, .events = POLLIN}};
  for (;;) {
    // Without the signalfd (EMFILE) the helper's state is looked at every 50 ms instead.
    int ready = poll(fds, chld >= 0 ? 2 : 1, chld >= 0 ? -1 : SCAN_INTERVAL_MS);
    if (ready < 0 && errno != EINTR) break;
    if (chld >= 0 && fds[1].revents) {
      struct signalfd_siginfo si;
      while (read(chld, &si, sizeof si) == sizeof si) {
      }
    }
    helper_stopped_or_gone(helper);
    if (!fds[0].revents) continue;
    ssize_t n = read(AWAIT_STATUS_FD, buf + used, sizeof buf - 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
    buf[used] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n'))) {
      *nl = '\0';
      int childless = 0, status = exit_status_of(line, &childless);
      if (status >= 0) {
        // A helper with nothing left exits at once: gone before the exec ends, so the session's
        // sweep finds it gone at its first scan. Bounded (1 s): one stopped again is continued.
        for (int i = 0; childless && i < 200 && !helper_stopped_or_gone(helper); i++) sleep_ms(5);
        return status;
      }
      // The helper's last failure, for the message if no `exit` line follows.
      if (!strncmp(line, "error ", 6) || !strncmp(line, "exec-failed ", 12) || !strncmp(line, "exit lost", 9))
        snprintf(said, sizeof said, " (it said: %s)", line);
      line = nl + 1;
    }
    used = strlen(line);
    memmove(buf, line, used + 1);
    if (used == sizeof buf - 1) used = 0; // not a status line of the helper's: dropped
  }
  fprintf(stderr, "tether-wrap: the helper %s ended without the command's status%s\n", name, said);
  return 125;
}

#include "helper-sweep.c"
#include "helper-serve.c"

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--await")) return await_helper(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "--sweep")) return sweep_main(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "--sweep-hold")) return sweep_hold();
  if (argc > 1 && !strcmp(argv[1], "--serve")) return serve_main(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "--call")) return call_main(argc, argv);
  // Wrap mode will hold the completion nonce: non-dumpable before it reads anything, so that no
  // process of its uid without CAP_SYS_PTRACE can read its memory or attach to it from here on.
  int dumpable_err = argc > 1 && !strcmp(argv[1], "--wrap") && prctl(PR_SET_DUMPABLE, 0) < 0 ? errno : 0;
  char **cmd = parse_args(argc, argv);
  supervisor = getppid();
  fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC);
  fcntl(CONTROL_FD, F_SETFD, FD_CLOEXEC);
  fcntl(ANSWER_FD, F_SETFD, FD_CLOEXEC); // optional: EBADF when the supervisor asks nothing
  signal(SIGPIPE, SIG_IGN);
  // Wrap mode starts with SIGUSR1 ignored: the wrapper shell ignores it while it holds this file
  // (programs/prelude.sh, hold_pinned until end_hold), and the command would inherit that — a
  // `kill -USR1 $$` then said `survived` where the wrapper's own commands end 138 (a fresh user's
  // trial; the resident server resets it the same way).
  if (wrap) signal(SIGUSR1, SIG_DFL);

  // Wrap mode: the one setup step that fails where it cannot work (EINVAL under qemu-user, or
  // before Linux 3.4) comes before the first line, so that the shell, which has not given the
  // nonce away yet, sees an `error` line instead of `helper` and proves the end itself.
  if (wrap && !dumpable_err && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    say("error subreaper %d\n", errno);
    return 125;
  }
  // The helper's own identity, when it can read it (no fd left, no /proc: the supervisor then
  // reads it itself from its child's pid). In wrap mode always, START 0 when unread: the shell
  // waits for this line to know the exec is done.
  unsigned long long own_start = 0;
  if (read_stat(getpid(), NULL, NULL, &own_start) == 0 || wrap) say("helper %d %llu\n", getpid(), own_start);
  if (dumpable_err) {
    say("error dumpable %d\n", dumpable_err);
    return 125;
  }
  // Wrap mode's cgroup is this helper's own (the wrapper made it for the payload): removed on
  // every way out, when empty — a helper that never started the payload leaves no cgroup behind.
  if (wrap && cgroup_dir) {
    // One that cannot be joined (gone, or no longer writable) is not announced: the payload
    // then runs without it, as where none could be made.
    char procs[4096];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", cgroup_dir);
    if (access(procs, W_OK) == 0)
      atexit(remove_own_cgroup);
    else {
      say("warn cgroup %d\n", errno);
      cgroup_dir = NULL;
    }
  }
  if (wrap && wrap_begin(own_start) < 0) return 125;
  if (become_subreaper() < 0) return 125;
  struct child_pipes pipes;
  if (start_payload(cmd, &pipes) < 0) return 125;
  // The supervisor opens the payload's pidfd now; nothing is reaped until it says go.
  int go = await_go();
  if (go != 0) {
    close(pipes.go); // the payload sees EOF and exits 125 without exec
    dead_mans_switch(go == 1);
    return 0;
  }
  let_payload_go(&pipes);
  return supervise();
}
