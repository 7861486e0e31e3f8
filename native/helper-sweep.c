// The helper's sweep mode (included by helper.c, whose utilities it uses: write_all,
// read_proc_stat, signal_identity, traced, now_ms, sleep_ms). docs/sandbox.md, "The helper answers the sweep".
//
//   tether-helper --sweep [--holder PID:START] TAG GRACE_MS KILL_AFTER_MS INTERVAL_MS [[member:|ended:]PID:START…]
//   (stdin: NONCE\n)
//
// The session's sweep inside a container, as the sweep program (src/sandbox/programs/sweep.sh)
// runs it in POSIX sh — the same rounds, the same members, the same records on stdout
// (docs/sandbox.md#sweep-output), so that one parser reads both — but written by this process,
// non-dumpable before it reads the nonce: a leftover of the session's uid without CAP_SYS_PTRACE
// can neither read the nonce from its memory nor trace it into writing a forged answer, as it
// could the shell's. Its header's second record says so: `reader helper`.
//
// Each round: one walk of /proc; the members are the carriers of TAG=1 (their environ, read here),
// the earlier finds still alive with the same identity (pid and start time), the helpers tether
// named (PID:START, by identity: of this uid, their environ holding the tag or unreadable:
// named_ok), the processes of the session's cgroups (tether-helper.HEX.* below this process's own
// cgroup, of the uid that owns each one's cgroup.procs) and every descendant of any of them. TERM
// once to each (then CONT to a stopped one), a scan every INTERVAL_MS until two scans in a row see
// nothing, the helpers' word proves the rest gone (`helper-childless`) or GRACE_MS is over; then
// KILL the same way for KILL_AFTER_MS. Never signalled: a pid <= 1, this process and its ancestors.
// Each signal goes through a pidfd opened after the start time is checked (signal_identity): never
// to a pid that another process took meanwhile.
//
// Checked at exec (src/sandbox/programs/sweep-helper.sh): the sweep shell pins this binary's
// inode on a fd and hashes it, starts `--sweep-hold` from it — a holder, which signals its parent
// (SIGUSR1, every 10 ms) once exec'd and does nothing else; while it runs, the kernel refuses every
// write to the inode (ETXTBSY) — hashes what the holder executes (/proc/H/exe, fd 9's inode),
// starts `--sweep --holder PID:START …` from the same inode, and once that exec is done checks that
// the holder still runs: the bytes that run are the ones hashed. The holder, this process's
// sibling, is never signalled here; the shell ends it.
#include <sys/resource.h>
#include <sys/stat.h>

#define SWEEP_ANSWER_FD 1

struct sw_member {
  pid_t pid, ppid;
  unsigned long long start;
  char state;
};

struct sw_tracked {
  pid_t pid;
  unsigned long long start;
  unsigned sent; // SW_TERM | SW_CONT | SW_KILL
  int denied;
};

enum { SW_TERM = 1, SW_CONT = 2, SW_KILL = 4 };

static struct {
  const char *tag;
  char entry[64]; // TAG=1
  char hex[33];
  char nonce[33];
  unsigned long lines;
  long t0;
  unsigned scans;
  int complete;
  // The session's helpers as tether named them.
  struct sw_id {
    pid_t pid;
    unsigned long long start;
  } *given, *proof, *ended; // as many as argv has words
  size_t ngiven, nproof, nended;
  struct sw_id holder; // the sweep shell's holder (--holder PID:START), never a member
  pid_t *excluded;      // this process and every ancestor
  size_t nexcluded, capexcluded;
  char own_cg[4096];
  // Every member found so far, and what it was sent.
  struct sw_tracked *tracked;
  size_t ntracked, captracked;
  // This scan: the snapshot (every live process we may signal) and its members.
  struct sw_member *table;
  size_t ntable, captable;
  unsigned char *is_member; // per table row
  size_t seen;
  // This round: how many members are alive after it, and which.
  size_t alive;
  unsigned char *alive_row; // per tracked entry
  // A `session` call's child (helper-serve.c, sweep_in_call): a subreaper whose children are
  // members, the answer kept in memory for its end line instead of written, and what takes it.
  pid_t root;
  char *answer;
  size_t nanswer, capanswer;
  int collect, lost;
  int limits_changed; // a session call's child whose limits a process of the uid changed
  int no_room; // an environ could not be opened for want of fds or memory: this scan failed
  void (*done)(void);
} sw;

// Grows *items (`size` bytes each) to hold `need`, its capacity doubled from `first`: 0, or -1
// (ENOMEM) with *items and *cap as they were. The sweep's tables all grow so.
static int grow(void **items, size_t *cap, size_t need, size_t first, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : first;
  while (n < need) n *= 2;
  void *more = realloc(*items, n * size);
  if (!more) {
    errno = ENOMEM;
    return -1;
  }
  *items = more;
  *cap = n;
  return 0;
}

// One record of the answer, counted: one write(2) per line (atomic on a pipe). A failed write
// (the stream gone) has nowhere to go: the sweep goes on, and tether, without the `done` line,
// reads it as cut.
static void answer_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer_line(const char *fmt, ...) {
  char line[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  sw.lines++;
  if (sw.collect) {
    if (grow((void **)&sw.answer, &sw.capanswer, sw.nanswer + (size_t)n, 16384, 1) < 0) {
      sw.lost = 1; // the count in `done` no longer matches: the answer is refused as cut
      return;
    }
    memcpy(sw.answer + sw.nanswer, line, (size_t)n);
    sw.nanswer += (size_t)n;
    return;
  }
  for (int tries = 0; write_all(SWEEP_ANSWER_FD, line, (size_t)n) < 0 && errno == EAGAIN && tries < 1200; tries++)
    sleep_ms(50);
}

// Control bytes (1-31 and 127) as `?`, NUL as a space (cmdline's separators): one record stays
// one line, whatever a process names itself.
static void printable(char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0)
      s[i] = ' ';
    else if (c < 32 || c == 127)
      s[i] = '?';
  }
}

// ---- /proc ---------------------------------------------------------------------------------

// One read(2) of /proc/PID/FILE (PID 0: self) into buf, NUL-terminated: its length, or -1 when it
// could not be opened or read or was empty.
static ssize_t proc_read(pid_t pid, const char *file, char *buf, size_t size) {
  char path[64];
  if (pid > 0)
    snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
  else
    snprintf(path, sizeof path, "/proc/self/%s", file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return n;
}

// A process's stat (read_proc_stat, helper.c): 0, or -1 when it is gone, unreadable, or a zombie with
// no live thread (dead: it cannot act on a signal). comm: up to 63 bytes, printable.
static int sw_stat(pid_t pid, struct sw_member *m, char *comm, size_t commsize) {
  struct proc_stat s;
  if (read_proc_stat(pid, &s) < 0) return -1;
  errno = ESRCH;
  if (s.state == 'Z' && s.threads <= 1) return -1;
  m->pid = pid;
  m->ppid = s.ppid;
  m->state = s.state;
  m->start = s.start;
  if (comm) {
    size_t len = s.commlen;
    if (len >= commsize) len = commsize - 1;
    memcpy(comm, s.comm, len);
    comm[len] = '\0';
    printable(comm, len);
  }
  return 0;
}

// The identity check before a word is taken: pid runs with that start time.
static int sw_same(pid_t pid, unsigned long long start) {
  struct sw_member m;
  return sw_stat(pid, &m, NULL, 0) == 0 && m.start == start;
}

// The real uid of a process (the first field of `Uid:` in its status), or -1 when unread.
static long sw_uid(pid_t pid) {
  char buf[4096];
  if (proc_read(pid, "status", buf, sizeof buf) < 0) return -1;
  const char *at = strstr(buf, "\nUid:");
  return at ? atol(at + 5) : -1;
}

// An errno that says this process is out of fds or memory: it could not look.
static int out_of_room(int err) { return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS; }

// 1 when the environ in the file at `path` holds the record TAG=1 exactly (between NULs), read
// as a stream: an environ of any size, one 64 KiB buffer. -1 when it could not be opened (errno
// says why: another uid's, a non-dumpable process's, or gone), -2 when it read as nothing (an
// exited leader, or an empty environ), 0 when it was read and holds no such record.
static int environ_holds(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && out_of_room(errno)) sw.no_room = 1;
  if (fd < 0) return -1;
  static char buf[65536];
  size_t len = strlen(sw.entry), at = 0; // at: bytes of the record matched so far; len+1 = no match
  int found = 0, any = 0;
  ssize_t n;
  while (!found && (n = read(fd, buf, sizeof buf)) > 0) {
    any = 1;
    for (ssize_t i = 0; i < n; i++) {
      char c = buf[i];
      if (c == '\0') {
        if (at == len) {
          found = 1;
          break;
        }
        at = 0;
      } else if (at < len && c == sw.entry[at]) {
        at++;
      } else {
        at = len + 1;
      }
    }
  }
  // The last record may lack its NUL (an environ rewritten in place).
  if (!found && any && at == len) found = 1;
  close(fd);
  return found ? 1 : any ? 0 : -2;
}

// A carrier: the environ of its leader, or — when that one reads as nothing (a leader that has
// exited takes the process's file with it) — of any of its threads, holds the tag.
static int carrier(pid_t pid) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/environ", pid);
  int r = environ_holds(path);
  if (r >= 0) return r;
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  int found = 0;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.20s/environ", pid, e->d_name);
    found = environ_holds(path) == 1;
  }
  closedir(d);
  return found;
}

// A process a start line named is a member on evidence no session member can forge past its own
// reach (sweep.sh, named_ok): it has this process's real uid, and its environ holds the tag or
// cannot be read — a non-dumpable helper's, for a reader without CAP_SYS_PTRACE. One whose environ
// reads without the tag is not the session's, whatever a line said.
static int named_ok(pid_t pid) {
  if (sw_uid(pid) != (long)getuid()) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/environ", pid);
  int r = environ_holds(path);
  if (r == -1) return errno == EACCES || errno == EPERM; // not readable: not gone
  // Read, it must hold the tag: an empty one (env -i) holds none.
  return r == 1;
}

static int sw_excluded(pid_t pid) {
  for (size_t i = 0; i < sw.nexcluded; i++)
    if (sw.excluded[i] == pid) return 1;
  return 0;
}

// snapshot: the table of every live process we may signal. -1 when /proc cannot be listed.
static int snapshot(void) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  sw.ntable = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 1 || pid > INT32_MAX || sw_excluded((pid_t)pid)) continue;
    struct sw_member m;
    if (sw_stat((pid_t)pid, &m, NULL, 0) < 0) {
      // Gone, or a stat that says nothing: skipped. Out of fds or memory (a limit a process of the
      // uid lowered: prlimit(2) on this one), this process cannot look: the scan failed — never
      // "gone", which would end a phase on two empty scans while the session runs (a break
      // attempt's: RLIMIT_NOFILE 4 on a call's child).
      if (out_of_room(errno)) {
        closedir(d);
        return -1;
      }
      continue;
    }
    if (m.pid == sw.holder.pid && m.start == sw.holder.start) continue; // by identity, not pid
    // The table and its is_member row grow together: one capacity, kept until both have it.
    size_t rows = sw.captable, flags = sw.captable;
    if (grow((void **)&sw.table, &rows, sw.ntable + 1, 1024, sizeof *sw.table) < 0 ||
        grow((void **)&sw.is_member, &flags, sw.ntable + 1, 1024, 1) < 0) {
      closedir(d);
      return -1;
    }
    sw.captable = rows;
    sw.table[sw.ntable++] = m;
  }
  closedir(d);
  return 0;
}

static struct sw_tracked *tracked_of(pid_t pid, unsigned long long start) {
  for (size_t i = 0; i < sw.ntracked; i++)
    if (sw.tracked[i].pid == pid && sw.tracked[i].start == start) return &sw.tracked[i];
  return NULL;
}

// First sight of a member: found, comm and cmdline records.
static void track(const struct sw_member *m, const char *found_by, pid_t via) {
  // The tracked entries and their alive_row grow together, as the table does.
  size_t rows = sw.captracked, flags = sw.captracked;
  if (grow((void **)&sw.tracked, &rows, sw.ntracked + 1, 64, sizeof *sw.tracked) < 0 ||
      grow((void **)&sw.alive_row, &flags, sw.ntracked + 1, 64, 1) < 0) {
    // Out of memory: this member is signalled this round but its fate is never said, and the
    // answer says the sweep was not whole.
    sw.complete = 0;
    return;
  }
  sw.captracked = rows;
  sw.tracked[sw.ntracked++] = (struct sw_tracked){.pid = m->pid, .start = m->start};
  long uid = sw_uid(m->pid);
  char uidtext[24] = "-", viatext[24] = "-";
  if (uid >= 0) snprintf(uidtext, sizeof uidtext, "%ld", uid);
  if (via > 0) snprintf(viatext, sizeof viatext, "%d", via);
  answer_line("found %d %llu %d %s %s %s", m->pid, m->start, m->ppid, uidtext, found_by, viatext);
  // Its name and cmdline, said only when its start time, read after them, is still the one found:
  // a pid another process took meanwhile would lend its own (empty instead).
  char comm[64] = "";
  struct sw_member again;
  (void)sw_stat(m->pid, &again, comm, sizeof comm);
  char cmd[4096];
  ssize_t n = proc_read(m->pid, "cmdline", cmd, sizeof cmd);
  if (n < 0) n = 0;
  printable(cmd, (size_t)n);
  cmd[n] = '\0';
  if (!sw_same(m->pid, m->start)) comm[0] = cmd[0] = '\0';
  answer_line("comm %d %llu %s", m->pid, m->start, comm);
  answer_line("cmdline %d %llu %s", m->pid, m->start, cmd);
}

// Makes table row i a member (once), found `found_by`; via: the parent it was found below.
static void take(size_t i, const char *found_by, pid_t via) {
  if (sw.is_member[i]) return;
  sw.is_member[i] = 1;
  sw.seen++;
  if (!tracked_of(sw.table[i].pid, sw.table[i].start)) track(&sw.table[i], found_by, via);
}

// ---- the session's cgroups ------------------------------------------------------------------

// DIR/NAME into out; -1 when it does not fit (such a cgroup is not looked into).
static int join_path(char *out, size_t size, const char *dir, const char *name) {
  size_t dl = strlen(dir), nl = strlen(name);
  if (dl + 1 + nl + 1 > size) return -1;
  memcpy(out, dir, dl);
  out[dl] = '/';
  memcpy(out + dl + 1, name, nl + 1);
  return 0;
}

// own_cg: this process's cgroup v2 directory (`0::PATH` of /proc/self/cgroup below the cgroup2
// mount whose root is a prefix of PATH), as the prelude's own_cgroup finds it; "" without one.
static void own_cgroup(void) {
  sw.own_cg[0] = '\0';
  char buf[8192], cg[4096] = "";
  int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
    if (!strncmp(line, "0::/", 4)) snprintf(cg, sizeof cg, "%s", line + 3);
  if (!cg[0] || strpbrk(cg, " \t\\")) return;
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) return;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    char root[4096], mount[4096];
    const char *sep = strstr(line, " - cgroup2 ");
    if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mount) != 2) continue;
    if (strchr(root, '\\') || strchr(mount, '\\')) continue;
    size_t rl = strlen(root);
    if (rl > 0 && root[rl - 1] == '/') root[--rl] = '\0';
    if (strncmp(cg, root, rl) != 0 || (cg[rl] != '\0' && cg[rl] != '/')) continue;
    size_t ml = strlen(mount);
    if (ml > 0 && mount[ml - 1] == '/') mount[--ml] = '\0';
    snprintf(sw.own_cg, sizeof sw.own_cg, "%s%s", mount, cg + rl);
    size_t ol = strlen(sw.own_cg);
    if (ol > 0 && sw.own_cg[ol - 1] == '/') sw.own_cg[ol - 1] = '\0';
    break;
  }
  free(line);
  fclose(f);
}

// 1 when `name` is a session cgroup's: tether-helper.HEX.PID.START (digits, one dot between).
static int session_cgroup_name(const char *name) {
  static const char prefix[] = "tether-helper.";
  size_t pl = sizeof prefix - 1;
  if (strncmp(name, prefix, pl) || strncmp(name + pl, sw.hex, 32) || name[pl + 32] != '.') return 0;
  const char *p = name + pl + 33;
  int dots = 0, digits = 0;
  for (; *p; p++) {
    if (*p == '.') {
      if (!digits) return 0;
      dots++;
      digits = 0;
    } else if (*p >= '0' && *p <= '9')
      digits++;
    else
      return 0;
  }
  return dots == 1 && digits > 0;
}

// Once per sweep: a session cgroup, or one below it, could not be read — what it holds was not
// looked for, so the answer is not whole.
static void cgroup_unread(int err) {
  static int told;
  sw.complete = 0;
  if (told++) return;
  answer_line("warning SCAN_FAILED a cgroup of the session could not be read (errno %d): what it holds was not looked for", err);
}

// The one walk of a cgroup tree, from the directory open as `dfd`: at(dfd) on each directory,
// then the same below each cgroup under it, at any depth — opened relative to its parent (no path
// grows), two fds per level — and after(parent, name) on each one below once its own tree is
// walked (children before parents). One removed meanwhile (ENOENT) held nothing more; any other
// failure to open or list one goes to unread (NULL: none), and what it holds is not walked.
struct cgroup_walk {
  void (*at)(int dfd);                         // NULL: none
  void (*after)(int parent, const char *name); // NULL: none
  void (*unread)(int err);                     // NULL: none
};

static void cgroup_walk_at(int dfd, const struct cgroup_walk *w) {
  if (w->at) w->at(dfd);
  int lfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
  DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
  if (!d) {
    if (lfd >= 0) close(lfd);
    if (w->unread && errno != ENOENT) w->unread(errno);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    // Every cgroup below, a name starting with '.' too (a command that can write its cgroup may
    // make `.x` and move there: sweep.sh's find lists it, and so must this walk). Not `.` or `..`,
    // nor a file (DT_UNKNOWN: opened, and a file is ENOTDIR).
    const char *n = e->d_name;
    int dots = n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
    if (dots || (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)) continue;
    int child = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) {
      if (w->unread && errno != ENOENT && errno != ENOTDIR) w->unread(errno);
      continue;
    }
    cgroup_walk_at(child, w);
    close(child);
    if (w->after) w->after(dfd, n);
  }
  closedir(d);
}

// One cgroup, open as `dfd`: every process in its cgroup.procs whose uid is the uid that owns that
// file (sweep.sh, cgroup_members: a process of another uid is never taken on a cgroup's word). One
// removed meanwhile (ENOENT) held nothing; any other failure is cgroup_unread.
static void cgroup_take_procs(int dfd) {
  int pfd = openat(dfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  struct stat st;
  FILE *f = NULL;
  if (pfd < 0) {
    if (errno != ENOENT) cgroup_unread(errno);
  } else if (fstat(pfd, &st) < 0 || !(f = fdopen(pfd, "re"))) {
    cgroup_unread(errno);
    close(pfd);
  }
  if (!f) return;
  long pid;
  while (fscanf(f, "%ld", &pid) == 1) {
    if (pid <= 1 || sw_uid((pid_t)pid) != (long)st.st_uid) continue;
    for (size_t i = 0; i < sw.ntable; i++)
      if (sw.table[i].pid == pid) take(i, "cgroup", 0);
  }
  fclose(f);
}

static const struct cgroup_walk take_walk = {.at = cgroup_take_procs, .unread = cgroup_unread};

static void take_cgroup(const char *dir) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    if (errno != ENOENT) cgroup_unread(errno);
    return;
  }
  cgroup_walk_at(dfd, &take_walk);
  close(dfd);
}

// Calls fn on each session cgroup's directory.
static void each_session_cgroup(void (*fn)(const char *)) {
  if (!sw.own_cg[0]) return;
  DIR *d = opendir(sw.own_cg);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[4096];
    if (session_cgroup_name(e->d_name) && join_path(path, sizeof path, sw.own_cg, e->d_name) == 0) fn(path);
  }
  closedir(d);
}


// rmdir of one cgroup below `parent` (cgroup_walk: deepest first): none that holds a process goes
// (EBUSY).
static void remove_one(int parent, const char *name) { (void)unlinkat(parent, name, AT_REMOVEDIR); }

// A cgroup that cannot be opened or listed is left as it is, unsaid.
static const struct cgroup_walk remove_walk = {.after = remove_one};

// rmdir of a session cgroup and every cgroup below it.
static void remove_cgroups(const char *dir) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd >= 0) {
    cgroup_walk_at(dfd, &remove_walk);
    close(dfd);
  }
  (void)rmdir(dir);
}

// ---- the rounds -----------------------------------------------------------------------------

static int listed(const struct sw_id *ids, size_t n, pid_t pid, unsigned long long start) {
  for (size_t i = 0; i < n; i++)
    if (ids[i].pid == pid && ids[i].start == start) return 1;
  return 0;
}

// The table's rows by parent pid, for take_descendants.
static int by_parent(const void *a, const void *b) {
  pid_t x = sw.table[*(const size_t *)a].ppid, y = sw.table[*(const size_t *)b].ppid;
  return (x > y) - (x < y);
}

// Every descendant of a member, by parent, breadth first: the rows sorted by parent once, each
// member's children found by binary search — a chain of any length costs one pass, not one per
// generation. -1 (ENOMEM) when the two index arrays cannot be had.
static int take_descendants(void) {
  size_t n = sw.ntable, *order = malloc((n + 1) * sizeof *order), *queue = malloc((n + 1) * sizeof *queue);
  if (!order || !queue) {
    free(order);
    free(queue);
    errno = ENOMEM;
    return -1;
  }
  size_t queued = 0;
  for (size_t i = 0; i < n; i++) {
    order[i] = i;
    if (sw.is_member[i]) queue[queued++] = i;
  }
  qsort(order, n, sizeof *order, by_parent);
  for (size_t q = 0; q < queued; q++) {
    pid_t parent = sw.table[queue[q]].pid;
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (sw.table[order[mid]].ppid < parent) lo = mid + 1;
      else hi = mid;
    }
    for (size_t k = lo; k < n && sw.table[order[k]].ppid == parent; k++) {
      size_t child = order[k];
      if (sw.is_member[child]) continue;
      take(child, "descendant", parent);
      queue[queued++] = child;
    }
  }
  free(order);
  free(queue);
  return 0;
}

// scan: the members of this round, in the order found. -1 when the process table cannot be read.
static int scan(void) {
  sw.no_room = 0;
  if (snapshot() < 0) return -1;
  sw.scans++;
  sw.seen = 0;
  memset(sw.is_member, 0, sw.ntable);
  // Earlier finds still alive with the same identity.
  for (size_t i = 0; i < sw.ntable; i++)
    if (tracked_of(sw.table[i].pid, sw.table[i].start)) sw.is_member[i] = 1, sw.seen++;
  // Carriers.
  for (size_t i = 0; i < sw.ntable; i++)
    if (!sw.is_member[i] && carrier(sw.table[i].pid) == 1) take(i, "carrier", 0);
  // The helpers tether named, by identity.
  for (size_t i = 0; i < sw.ntable; i++)
    if (!sw.is_member[i] && listed(sw.given, sw.ngiven, sw.table[i].pid, sw.table[i].start) &&
        named_ok(sw.table[i].pid))
      take(i, "given", 0);
  // What the session's cgroups hold.
  each_session_cgroup(take_cgroup);
  // A `session` call's child: what the command left is its child (it is their subreaper).
  if (sw.root > 0)
    for (size_t i = 0; i < sw.ntable; i++)
      if (!sw.is_member[i] && sw.table[i].ppid == sw.root) take(i, "descendant", sw.root);
  if (sw.no_room) {
    errno = EMFILE;
    return -1;
  }
  return take_descendants();
}

// helpers_childless: the kernel's word that the session holds nothing but its helpers
// (sweep.sh, helpers_childless): every member this scan is a named helper, each named helper is
// among them with no child on any of its threads' children lists, and every helper whose end
// line said `childless` is gone.
static int helpers_childless(void) {
  if (!sw.nproof && !sw.nended) return 0;
  for (size_t i = 0; i < sw.ntable; i++)
    if (sw.is_member[i] && !listed(sw.proof, sw.nproof, sw.table[i].pid, sw.table[i].start)) return 0;
  for (size_t h = 0; h < sw.nended; h++)
    if (sw_same(sw.ended[h].pid, sw.ended[h].start)) return 0;
  for (size_t h = 0; h < sw.nproof; h++) {
    int found = 0;
    for (size_t i = 0; i < sw.ntable; i++)
      if (sw.is_member[i] && sw.table[i].pid == sw.proof[h].pid && sw.table[i].start == sw.proof[h].start)
        found = 1;
    if (!found) return 0;
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", sw.proof[h].pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int childless = 1;
    while (childless && (e = readdir(d))) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      char kids[64];
      snprintf(path, sizeof path, "/proc/%d/task/%.20s/children", sw.proof[h].pid, e->d_name);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        childless = 0;
        break;
      }
      ssize_t n = read(fd, kids, sizeof kids);
      close(fd);
      if (n != 0) childless = 0;
    }
    closedir(d);
    if (!childless || !sw_same(sw.proof[h].pid, sw.proof[h].start)) return 0;
  }
  return 1;
}

// root_childless: a `session` call's child, the subreaper of everything its command started, has
// no child (the kernel's word, has_children) and this scan found no member — no carrier of the
// tag, nothing in the session's cgroups: nothing of the session is left (docs/sandbox.md, "One
// exec per sandbox.run").
static int root_childless(void) { return sw.root > 0 && sw.seen == 0 && has_children() == 0; }

// helpers_gone: the named helpers, childless, are gone — looked at every 5 ms, 40 times at most.
static int helpers_gone(void) {
  for (int tries = 0; tries < 40; tries++) {
    int left = 0;
    for (size_t h = 0; h < sw.nproof; h++) left |= sw_same(sw.proof[h].pid, sw.proof[h].start);
    if (!left) {
      sw.alive = 0;
      memset(sw.alive_row, 0, sw.ntracked);
      return 1;
    }
    sleep_ms(5);
  }
  return 0;
}

static const char *sig_name(int sig) { return sig == SIGTERM ? "TERM" : sig == SIGKILL ? "KILL" : "CONT"; }

static unsigned sig_bit(int sig) { return sig == SIGTERM ? SW_TERM : sig == SIGKILL ? SW_KILL : SW_CONT; }

// deliver: `sig` once per member, checked against its start time as it is sent; counts it in
// `alive` unless it is gone.
static void deliver(int sig, const struct sw_member *m) {
  struct sw_tracked *t = tracked_of(m->pid, m->start);
  if (!t) return; // untracked (out of memory): not signalled, the answer is not whole
  size_t row = (size_t)(t - sw.tracked);
  if ((t->sent & sig_bit(sig)) || t->denied) {
    sw.alive++;
    sw.alive_row[row] = 1;
    return;
  }
  enum sent r = signal_identity(m->pid, m->start, sig);
  if (r == GONE) return;
  if (r == SENT) {
    t->sent |= sig_bit(sig);
    answer_line("signal %d %llu %s", m->pid, m->start, sig_name(sig));
    if (sig == SIGTERM && (m->state == 'T' || m->state == 't') &&
        signal_identity(m->pid, m->start, SIGCONT) == SENT) {
      t->sent |= SW_CONT;
      answer_line("signal %d %llu CONT", m->pid, m->start);
    }
  } else if (sw_same(m->pid, m->start)) {
    t->denied = 1;
    answer_line("denied %d %llu %s", m->pid, m->start, sig_name(sig));
  } else {
    return;
  }
  sw.alive++;
  sw.alive_row[row] = 1;
}

// A member of this scan that the caller named (a helper, the wrapper's --await process, an ended
// helper): tether's own machinery.
static int named(size_t i) { return listed(sw.given, sw.ngiven, sw.table[i].pid, sw.table[i].start); }

// Whether row i's parent is a member of this scan, not named, and not yet signalled this round
// (is_member 1; 2 once delivered, set back at the round's end).
static int parent_waits(size_t i) {
  for (size_t j = 0; j < sw.ntable; j++)
    if (sw.is_member[j] == 1 && j != i && sw.table[j].pid == sw.table[i].ppid && !named(j)) return 1;
  return 0;
}

// round: scan, then signal every member not yet sent `sig`: each before what it started, the
// named ones last, the last found first (a helper after what it holds: TERMed first it ends some
// of them itself, and the report said they `exited`). A process before its children: TERMed
// after its child, a shell whose TERM is not handled ran its next step in between — a cancelled
// `sh -c 'sleep 3; echo done'` exited 0, `done` printed (a fresh user's trial: 3 of 6 cancels of
// a resident `sandbox run`). *proven when the helpers' word holds. -1 when the scan failed.
static int round_(int sig, int *proven) {
  if (sw.root > 0) reap(); // a session call's child: what it adopted and has ended
  if (scan() < 0) return -1;
  *proven = helpers_childless() || root_childless();
  sw.alive = 0;
  memset(sw.alive_row, 0, sw.ntracked);
  // The session's own processes, a generation at a time: those whose parent is no member waiting
  // for this round's signal, then their children. A parent loop (pids reused) ends the passes;
  // what is left is signalled as found.
  for (int progress = 1; progress;) {
    progress = 0;
    for (size_t i = 0; i < sw.ntable; i++) {
      if (sw.is_member[i] != 1 || named(i) || parent_waits(i)) continue;
      deliver(sig, &sw.table[i]);
      sw.is_member[i] = 2;
      progress = 1;
    }
  }
  for (size_t i = 0; i < sw.ntable; i++)
    if (sw.is_member[i] == 1 && !named(i)) {
      deliver(sig, &sw.table[i]);
      sw.is_member[i] = 2;
    }
  // The named ones, in the order they were first found (tracked), backwards.
  for (size_t k = sw.ntracked; k-- > 0;) {
    for (size_t i = 0; i < sw.ntable; i++) {
      if (sw.is_member[i] != 1 || sw.table[i].pid != sw.tracked[k].pid || sw.table[i].start != sw.tracked[k].start)
        continue;
      deliver(sig, &sw.table[i]);
      break;
    }
  }
  for (size_t i = 0; i < sw.ntable; i++)
    if (sw.is_member[i] == 2) sw.is_member[i] = 1;
  return 0;
}

// The KILL phase's last look left members alive, each sent its KILL there or before: watched for
// up to 500 ms, one whose identity is gone or only a zombie now is gone, never named a survivor
// for a KILL sent a moment before the answer. A last look that found a process no earlier round
// had (`known`: how many were tracked before it) saw the session's processes still appearing —
// one taking the tag from outside the session (test/sandbox/last-look): unsettled.
static void settle_last_look(size_t known) {
  for (long until = now_ms() + 500; sw.alive > 0; sleep_ms(10)) {
    if (sw.root > 0) reap(); // a session call's child: the zombies it adopted
    for (size_t i = 0; i < sw.ntracked; i++) {
      const struct sw_tracked *t = &sw.tracked[i];
      if (!sw.alive_row[i] || t->denied || !(t->sent & SW_KILL)) continue;
      struct sw_member m;
      if (sw_stat(t->pid, &m, NULL, 0) == 0 && m.start == t->start && m.state != 'Z' && m.state != 'X') continue;
      sw.alive_row[i] = 0;
      sw.alive--;
    }
    if (now_ms() >= until) break;
  }
  if (sw.ntracked > known) {
    sw.complete = 0;
    answer_line("warning UNSETTLED processes of the session were still appearing when the KILL phase ended: some may still run");
  }
}

static void phase_done(int sig, long started, int rounds, const char *ended_by) {
  answer_line("phase %s %ld %ld %d %s", sig_name(sig), started - sw.t0, now_ms() - started, rounds, ended_by);
}

static void finish(void) __attribute__((noreturn));
static void finish(void) {
  for (size_t i = 0; i < sw.ntracked; i++) {
    const struct sw_tracked *t = &sw.tracked[i];
    const char *fate = !sw.alive_row[i] ? "gone" : t->denied ? "denied" : "survived-kill";
    answer_line("end %d %llu %s", t->pid, t->start, fate);
  }
  each_session_cgroup(remove_cgroups);
  // The proof: the records before it, counted, and the nonce. Nothing may follow it.
  answer_line("done %s %u %ld %d %lu %s", sw.tag, sw.scans, now_ms() - sw.t0, sw.complete, sw.lines, sw.nonce);
  if (sw.done) sw.done();
  exit(0);
}

// ---- arguments, the holder, the nonce -------------------------------------------------------

// PID:START, digits without a leading zero, the pid above 1 (sweep.sh, identity).
static int parse_identity(const char *s, struct sw_id *id) {
  char *end;
  if (s[0] < '1' || s[0] > '9') return -1;
  long long pid = strtoll(s, &end, 10);
  if (*end != ':' || pid <= 1 || pid > INT32_MAX || end - s > 10) return -1;
  const char *st = end + 1;
  if (st[0] < '1' || st[0] > '9') return -1;
  unsigned long long start = strtoull(st, &end, 10);
  if (*end || end - st > 20) return -1;
  id->pid = (pid_t)pid;
  id->start = start;
  return 0;
}

static int sweep_usage(const char *what) {
  answer_line("error usage %s", what);
  return 2;
}

// --sweep-hold: the holder (above). It says so every 10 ms, not once: a shell may run a trap that
// came just before its `wait` only after that wait, which then waits for a holder that never
// ends (mksh). Killed with its parent (PR_SET_PDEATHSIG; an exec is not a death): a shell that
// dies between the two hashes leaves no holder behind; and it ends by itself after a minute.
static int sweep_hold(void) {
  pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || parent <= 1 || getppid() != parent) return 125;
  for (int i = 0; i < 6000 && kill(parent, SIGUSR1) == 0; i++) sleep_ms(10);
  return 0;
}

// Adds pid to the processes never signalled; -1 (ENOMEM) when it cannot.
static int exclude(pid_t pid) {
  if (grow((void **)&sw.excluded, &sw.capexcluded, sw.nexcluded + 1, 64, sizeof *sw.excluded) < 0) return -1;
  sw.excluded[sw.nexcluded++] = pid;
  return 0;
}

static void sweep_rounds(long grace, long kill_after, long interval) __attribute__((noreturn));

static int sweep_main(int argc, char **argv) {
  // Non-dumpable before anything is read: no process of this uid without CAP_SYS_PTRACE can
  // read the nonce from this process's memory or trace it into another answer.
  if (prctl(PR_SET_DUMPABLE, 0) < 0 || traced()) {
    fprintf(stderr, "tether-sweep: the helper could not make itself untraceable: no sweep ran\n");
    return 125;
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // The cgroup walk takes two fds per level: as many as this process may have.
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  int a = 2;
  if (argc > a + 1 && !strcmp(argv[a], "--holder")) {
    // The shell's holder, PID:START, this process's sibling: never a member (the shell ends it).
    if (parse_identity(argv[a + 1], &sw.holder) < 0) return sweep_usage("holder");
    a += 2;
  }
  if (argc < a + 4) return sweep_usage("arguments");
  sw.tag = argv[a];
  if (strncmp(sw.tag, "TETHER_SESSION_", 15) || strlen(sw.tag) != 47 || strspn(sw.tag + 15, "0123456789abcdef") != 32)
    return sweep_usage("tag");
  memcpy(sw.hex, sw.tag + 15, 33);
  snprintf(sw.entry, sizeof sw.entry, "%s=1", sw.tag);
  long durations[3];
  for (int i = 0; i < 3; i++) {
    const char *s = argv[a + 1 + i];
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9) return sweep_usage("duration");
    durations[i] = strtol(s, NULL, 10);
  }
  long grace = durations[0], kill_after = durations[1], interval = durations[2];
  size_t words = (size_t)(argc - (a + 4));
  sw.given = calloc(words + 1, sizeof *sw.given);
  sw.proof = calloc(words + 1, sizeof *sw.proof);
  sw.ended = calloc(words + 1, sizeof *sw.ended);
  if (!sw.given || !sw.proof || !sw.ended) return sweep_usage("memory");
  for (int i = a + 4; i < argc; i++) {
    const char *w = argv[i];
    struct sw_id id;
    int member = !strncmp(w, "member:", 7), ended = !strncmp(w, "ended:", 6);
    if (parse_identity(w + (member ? 7 : ended ? 6 : 0), &id) < 0) return sweep_usage("helper");
    sw.given[sw.ngiven++] = id;
    if (ended) sw.ended[sw.nended++] = id;
    else if (!member) sw.proof[sw.nproof++] = id;
  }
  // The nonce, a byte at a time (what follows it on stdin is not ours).
  char first[34];
  size_t n = 0;
  for (;;) {
    char c;
    ssize_t r = read(0, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || c == '\n') break;
    if (n < sizeof first - 1) first[n] = c;
    n++;
  }
  if (n != 32 || strspn(first, "0123456789abcdef") < 32) {
    answer_line("tether-sweep 2 no-nonce %s", sw.tag);
    fprintf(stderr, "tether-sweep: no nonce on stdin (is the exec channel's stdin attached? docker exec needs -i): nothing was signalled\n");
    return 125;
  }
  memcpy(sw.nonce, first, 32);
  sw.nonce[32] = '\0';
  sweep_rounds(grace, kill_after, interval);
}

// The sweep itself, once the tag, the helpers and the nonce are set: the header, the phases, the
// answer's end (finish). Never returns.
static void sweep_rounds(long grace, long kill_after, long interval) {
  sw.lines = 0;
  answer_line("tether-sweep 2 begin %s", sw.tag);
  sw.t0 = now_ms();
  sw.complete = 1;
  answer_line("reader helper");
  if (sw.limits_changed) {
    sw.complete = 0;
    answer_line("warning SCAN_FAILED the resource limits of the call's child were changed while its command ran (a process of the session's uid can): its sweep may not see everything");
  }
  // This process and its ancestors are never members (nor the shell's holder: snapshot).
  int listed_all = 1;
  for (pid_t p = getpid(); p > 1 && listed_all;) {
    struct sw_member m;
    listed_all = exclude(p) == 0;
    if (sw_stat(p, &m, NULL, 0) < 0) break;
    p = m.ppid;
  }
  if (!listed_all) {
    // One that could not be listed could be signalled: no sweep at all.
    fprintf(stderr, "tether-sweep: out of memory listing the processes it must spare: no sweep ran\n");
    if (sw.done) sw.done(); // an answer without `done`: cut
    exit(125);
  }
  own_cgroup();
  // /proc of this process's PID namespace, or none at all: NO_PROC. /proc/self/stat must name this
  // process (sweep.sh, procfs_ok): another namespace's /proc would show other processes under
  // these pids, and a pidfd opened here would name this namespace's.
  char self[64];
  if (proc_read(0, "stat", self, sizeof self) < 0 || atol(self) != (long)getpid()) {
    sw.complete = 0;
    answer_line("warning NO_PROC /proc is missing or belongs to another PID namespace: processes of %s were not looked for", sw.tag);
    finish();
  }
  static const int sigs[2] = {SIGTERM, SIGKILL};
  for (int s = 0; s < 2; s++) {
    int sig = sigs[s];
    long started = now_ms(), budget = sig == SIGTERM ? grace : kill_after;
    int rounds = 0, empty = 0, proven = 0;
    for (;;) {
      rounds++;
      if (round_(sig, &proven) < 0) {
        sw.complete = 0;
        answer_line("warning SCAN_FAILED the process table could not be read");
        phase_done(sig, started, rounds, "scan-failed");
        finish();
      }
      if (proven && helpers_gone()) {
        phase_done(sig, started, rounds, "helper-childless");
        finish();
      }
      empty = sw.seen == 0 ? empty + 1 : 0;
      // A session call's child that still has a child no scan found (a fork-and-exit chain faster
      // than the scans: a break attempt's): two empty scans prove nothing against the kernel's word;
      // the rounds go on, and only its childlessness ends them before the budget.
      if (empty >= 2 && sw.root > 0 && has_children() != 0) empty = 0;
      if (empty >= 2) {
        phase_done(sig, started, rounds, "two-empty-scans");
        finish();
      }
      if (now_ms() - started >= budget) break;
      sleep_ms(interval);
    }
    if (sig == SIGKILL) {
      // A process first found in the last round got its KILL a moment ago: look once more —
      // and what that look KILLs is watched die too (settle_last_look).
      sleep_ms(interval);
      rounds++;
      size_t known = sw.ntracked;
      if (round_(SIGKILL, &proven) < 0) {
        sw.complete = 0;
        phase_done(SIGKILL, started, rounds, "scan-failed");
        finish();
      }
      if (sw.alive == 0 && (sw.seen > 0 || (sw.root > 0 && has_children() != 0))) {
        sw.complete = 0;
        answer_line("warning UNSETTLED processes of the session were still appearing when the KILL phase ended: some may still run");
      } else if (sw.alive == 0) {
        phase_done(SIGKILL, started, rounds, "verified-empty");
        finish();
      } else {
        settle_last_look(known);
      }
    }
    phase_done(sig, started, rounds, "budget");
  }
  finish();
}
