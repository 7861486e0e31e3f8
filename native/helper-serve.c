// The resident helper (included by helper.c, whose utilities it uses: write_all, read_line,
// read_stat, traced, put_line's retry). docs/sandbox.md, "The resident helper".
//
//   tether-helper --serve DIR [--idle MS]      (stdin: tether-serve TPK\n)
//   tether-helper --call DIR                   (stdin: the request line, then the command's stdin)
//
// --serve: started once per channel through the checked path (the file hashed and held at its
// exec, as --wrap is). Non-dumpable before it reads anything, it agrees a key with tether by
// X25519 over its streams: TPK is tether's public key (64 hex digits); it draws its own secret
// key (getrandom(2)), and the key is HMAC-SHA-256(the shared secret, TPK || SPK), both raw. It
// makes DIR (0700; it must not exist), listens on DIR/sock, and prints
//
//   tether-serve SPK PID START MAC\n
//
// (SPK its public key, PID and START the server's identity, MAC = HMAC-SHA-256 under the key of
// everything before its space, in hex) and leaves the exec: the server is a child in a POSIX
// session of its own, its stdio /dev/null, which ends itself after --idle MS (default 600000)
// without a call, once DIR/sock is no longer its socket, or once its limits, nice value, CPU
// affinity, scheduling attributes or I/O priority are not what they were at its start
// (limits_kept), or on SIGTERM (a `stop` request's).
//
// --call: what each later call execs directly, no shell and no hash: it passes its own stdin,
// stdout and stderr to the server over DIR/sock (SCM_RIGHTS) and exits with the byte the server's
// child sends back: 0 once that child has taken the whole of its stdin (call_release: the exec
// ends while the command runs, its streams the child's and the command's), else the command's
// status. It is never trusted — it holds no key — and bytes swapped in for it can drop, stall
// or misroute the streams, never write a line that verifies. Each call has a child of the server,
// forked ahead of it (idle_wait): the one child that waits on DIR/sock takes the connection,
// clears the PR_SET_PDEATHSIG(SIGKILL) it waited under, tells the server (a byte on a socketpair:
// the server forks the next one) and is the call's; where none could be forked the server accepts
// and forks per connection. A server's end, KILL included, ends its waiting child; the window left
// is that child's accept4(2) to its prctl(2), where the connection it took is cut before anything
// ran. The call's child reads the request from the passed stdin in two reads, within
// CALL_FDS_WAIT_MS (the command's stdin starts right after it):
//
//   tether-call LEN KIND NONCE TAG ARG0 ARG1 … MAC\n
//
// LEN 8 decimal digits, the bytes after its space, newline included (so that the request is read
// in two reads, never past its end), KIND `run` (or `ping`: the server answers
// `tether-pong NONCE MAC` and runs nothing; or `stop`: `tether-stopped NONCE MAC`, and the server
// ends), NONCE 32 hex digits, TAG the session tag's 32 hex digits (the command runs with
// TETHER_SESSION_<TAG>=1 added to the server's environment), each ARG the bytes of one argv word
// in hex, MAC tether's HMAC of everything before its space. A request that does not verify runs
// nothing. The command starts in a POSIX session of its own (setsid), with the passed stdout and
// stderr; its stdin is a socket the child fills from the passed stdin, hashing every byte it
// takes (call_relay). Once it is reaped the child writes, after everything the command wrote,
//
//   tether-end NONCE exit STATUS in BYTES SHA256 eof|open MAC\n
//
// (STATUS 0-255, 128+N for a signal N; BYTES and SHA256 what it took off the stdin after the
// request, `eof` when that stdin had ended by the command's end) and sends STATUS to the client
// as one byte, if the client is still there (call_release).
// Exit statuses of --call for its own failures: 125, with one `tether-call: …` line on stderr.

#include <spawn.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#ifdef TETHER_SODIUM
#include <sodium.h>
// The two libsodium functions its SHA-256 and X25519 call outside themselves (SHA-256's final
// step wipes its state; X25519's field code tests for zero), defined here as libsodium documents
// them, so that the static link takes libsodium's SHA-256, X25519 and crypto_verify_32 alone:
// its own sit in utils.o beside its allocator, which links in its random generator, its CPU
// dispatch and everything that dispatches (about 200 KB more).
void sodium_memzero(void *const pnt, const size_t len) { explicit_bzero(pnt, len); }
int sodium_is_zero(const unsigned char *n, const size_t nlen) {
  volatile unsigned char d = 0;
  for (size_t i = 0; i < nlen; i++) d |= n[i];
  return 1 & ((d - 1) >> 8);
}
#endif

#define SERVE_IDLE_MS 600000L
#define SERVE_CALLS_MAX 256
#define CALL_LINE_MAX (256 * 1024)
#define CALL_FDS_WAIT_MS 10000

static const char hex_digits[] = "0123456789abcdef";

static void to_hex(const unsigned char *bytes, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex_digits[bytes[i] >> 4];
    out[2 * i + 1] = hex_digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Lower-case hex of exactly 2 * n digits into n bytes: 0, or -1 for anything else.
static int from_hex(const char *text, size_t len, unsigned char *out, size_t n) {
  if (len != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  return 0;
}

// The path DIR/sock in a sockaddr_un: 0, or -1 (ENAMETOOLONG) when it does not fit.
static int serve_address(const char *dir, struct sockaddr_un *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  int n = snprintf(addr->sun_path, sizeof addr->sun_path, "%s/sock", dir);
  errno = ENAMETOOLONG;
  return n < 0 || (size_t)n >= sizeof addr->sun_path ? -1 : 0;
}

// ---- --call: the client, trusted with nothing ---------------------------------------------

static int call_main(int argc, char **argv) {
  // Non-dumpable first: until its streams are the server's child's alone, a process of the uid
  // could open them through /proc/PID/fd, take the request off stdin and have it run with streams
  // of its own (the line it then gets verifies). The window left is this exec's own, up to here.
  prctl(PR_SET_DUMPABLE, 0);
  struct sockaddr_un addr;
  if (argc != 3 || serve_address(argv[2], &addr) < 0) {
    fprintf(stderr, "tether-call: usage: tether-helper --call DIR (a directory of --serve's)\n");
    return 125;
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
    // A word for a person only: tether takes no line of this client's (bytes swapped in for it,
    // or the command, could print this one after running), and never sends a call twice.
    fprintf(stderr, "tether-call: no-server: %s: %s\n", addr.sun_path, strerror(errno));
    return 125;
  }
  int fds[3] = {0, 1, 2};
  char byte = 'c';
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(sizeof fds)];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t sent;
  while ((sent = sendmsg(s, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (sent != 1) {
    fprintf(stderr, "tether-call: no-server: %s: sendmsg: %s\n", addr.sun_path, strerror(errno));
    return 125;
  }
  // The server's child holds the streams now; this process keeps stderr for its own lines only.
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    close(null);
  }
  unsigned char status;
  ssize_t n;
  while ((n = read(s, &status, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) {
    fprintf(stderr, "tether-call: the server ended the call without its status\n");
    return 125;
  }
  return status; // 0 when released while the command runs (call_release)
}

#ifndef TETHER_SODIUM

static int serve_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("tether-serve unsupported\n");
  return 125;
}

#else

// HMAC-SHA-256 (RFC 2104) of text[0..len) under key (32 bytes) into mac, over libsodium's
// SHA-256 alone: its crypto_auth_hmacsha256 object also holds a keygen, which would link in
// libsodium's random generator and CPU dispatch (about 200 KB more in the static helper).
static void hmac_sha256(unsigned char mac[32], const unsigned char *text, size_t len, const unsigned char key[32]) {
  unsigned char pad[64], inner[32];
  crypto_hash_sha256_state state;
  for (int outer = 0; outer < 2; outer++) {
    memset(pad, outer ? 0x5c : 0x36, sizeof pad);
    for (int i = 0; i < 32; i++) pad[i] ^= key[i];
    crypto_hash_sha256_init(&state);
    crypto_hash_sha256_update(&state, pad, sizeof pad);
    if (outer)
      crypto_hash_sha256_update(&state, inner, sizeof inner);
    else
      crypto_hash_sha256_update(&state, text, len);
    crypto_hash_sha256_final(&state, outer ? mac : inner);
  }
  explicit_bzero(pad, sizeof pad);
  explicit_bzero(inner, sizeof inner);
}

static unsigned char serve_key[32];

// HMAC-SHA-256 under the key of text[0..len), in hex (64 digits and NUL).
static void serve_mac(const char *text, size_t len, char out[65]) {
  unsigned char mac[32];
  hmac_sha256(mac, (const unsigned char *)text, len, serve_key);
  to_hex(mac, sizeof mac, out);
}

// `line` ends in ` MAC` (64 hex digits) that verifies over everything before it: 1, else 0.
// Compared in constant time (crypto_verify_32).
static int serve_verifies(const char *line, size_t len) {
  unsigned char mac[32], want[32];
  if (len < 65 || line[len - 65] != ' ') return 0;
  if (from_hex(line + len - 64, 64, mac, sizeof mac) < 0) return 0;
  hmac_sha256(want, (const unsigned char *)line, len - 65, serve_key);
  return crypto_verify_32(mac, want) == 0;
}

// Reads tether's public key, draws this server's, and sets serve_key. 0, or -1 with a
// `tether-serve error WHAT ERRNO` line printed.
static int serve_agree(unsigned char spk[crypto_scalarmult_curve25519_BYTES]) {
  char line[160];
  unsigned char tpk[crypto_scalarmult_curve25519_BYTES], sk[crypto_scalarmult_curve25519_SCALARBYTES];
  unsigned char shared[crypto_scalarmult_curve25519_BYTES];
  int len = read_line(0, line, sizeof line);
  if (len < 0 || strncmp(line, "tether-serve ", 13) != 0 || from_hex(line + 13, (size_t)len - 13, tpk, sizeof tpk) < 0) {
    printf("tether-serve error request %d\n", EINVAL);
    return -1;
  }
  for (size_t got = 0; got < sizeof sk;) {
    ssize_t n = getrandom(sk + got, sizeof sk - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      printf("tether-serve error getrandom %d\n", errno);
      return -1;
    }
    got += (size_t)n;
  }
  crypto_scalarmult_curve25519_base(spk, sk);
  // -1 for a public key of small order (the shared secret would be all zeros).
  int bad = crypto_scalarmult_curve25519(shared, sk, tpk);
  explicit_bzero(sk, sizeof sk);
  if (bad) {
    explicit_bzero(shared, sizeof shared);
    printf("tether-serve error public-key %d\n", EINVAL);
    return -1;
  }
  unsigned char both[sizeof tpk + crypto_scalarmult_curve25519_BYTES];
  memcpy(both, tpk, sizeof tpk);
  memcpy(both + sizeof tpk, spk, crypto_scalarmult_curve25519_BYTES);
  hmac_sha256(serve_key, both, sizeof both, shared);
  explicit_bzero(shared, sizeof shared);
  return 0;
}

// Waits up to CALL_FDS_WAIT_MS for the client's message and takes its three fds onto 0, 1, 2.
// 0, or -1 (nothing to answer: the client is gone or is not ours).
static int call_take_streams(int conn) {
  struct pollfd p = {.fd = conn, .events = POLLIN};
  int ready;
  while ((ready = poll(&p, 1, CALL_FDS_WAIT_MS)) < 0 && errno == EINTR) {
  }
  if (ready <= 0) return -1;
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
  ssize_t n;
  while ((n = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  struct cmsghdr *c = n == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(3 * sizeof(int)) ||
      (msg.msg_flags & MSG_CTRUNC))
    return -1;
  int fds[3];
  memcpy(fds, CMSG_DATA(c), sizeof fds);
  for (int i = 0; i < 3; i++)
    if (dup2(fds[i], i) < 0) return -1;
  for (int i = 0; i < 3; i++)
    if (fds[i] > 2) close(fds[i]);
  return 0;
}

// The server's pid (its child of a call's parent), and its SIGTERM: the loop ends, its socket and
// directory removed (a `stop` request sends it).
static pid_t serve_pid;
static volatile sig_atomic_t serve_stop;
static void on_child(int sig) { (void)sig; }
static void on_stop(int sig) {
  (void)sig;
  serve_stop = 1;
}

// While the server loops, SIGTERM and SIGCHLD are blocked but inside its waits (serve_wait: ppoll(2)
// takes the mask without them, atomically): one that came between the loop's look at serve_stop
// and its children and its wait was not seen until the wait's 1 s timeout — a stop's exit up to
// 1 s late (a fresh user's trial: 2 of 16). `serve_mask_open` is the mask without them, which each
// child of the server takes back first (serve_unblock): its command must not start with them
// blocked.
static sigset_t serve_mask_open;
static void serve_block(void) {
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGTERM);
  sigaddset(&both, SIGCHLD);
  sigprocmask(SIG_BLOCK, &both, &serve_mask_open);
  sigdelset(&serve_mask_open, SIGTERM);
  sigdelset(&serve_mask_open, SIGCHLD);
}
static void serve_unblock(void) { sigprocmask(SIG_SETMASK, &serve_mask_open, NULL); }
static int serve_wait(struct pollfd *fds, nfds_t n, int ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  return ppoll(fds, n, &t, &serve_mask_open);
}

// What the server's commands inherit from it, as it was at its start: every resource limit, its
// nice value, its CPU affinity, its scheduling policy and attributes (sched_getattr(2): the policy,
// its priority and flags — SCHED_IDLE, SCHED_BATCH, reset-on-fork — and the utilization clamps)
// and its I/O priority. A process of the uid may change them (prlimit(2), setpriority(2),
// sched_setaffinity(2), sched_setscheduler(2) and sched_setattr(2), ioprio_set(2) ask no more than
// the uid; none needs the target dumpable), and every later call's command would inherit them —
// another session's too: the server ends instead, and a call's child that finds them changed runs
// nothing. (The scheduling policy and the I/O class were found missing by a break attempt:
// SCHED_IDLE and the idle I/O class set on the pre-forked child were the next call's command's.)
struct sched_attr_v1 { // struct sched_attr of <linux/sched/types.h>, SCHED_ATTR_SIZE_VER1
  uint32_t size, policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime, deadline, period;
  uint32_t util_min, util_max;
};

#define IOPRIO_WHO_PROCESS 1

static struct {
  struct rlimit rl[RLIM_NLIMITS];
  int nice;
  cpu_set_t cpus;
  int cpus_ok;
  struct sched_attr_v1 sched;
  int sched_ok; // sched_getattr(2) answered (Linux 3.14 on); else the policy and priority alone
  int policy;
  struct sched_param param;
  long ioprio; // -1: ioprio_get(2) did not answer (not compared)
} at_start;

// The scheduling attributes of `pid` (0: this process), as sched_getattr(2) gives them: 0, or -1.
static int sched_of(pid_t pid, struct sched_attr_v1 *out) {
  memset(out, 0, sizeof *out);
  if (syscall(SYS_sched_getattr, pid, out, sizeof *out, 0) < 0) return -1;
  out->size = 0; // the kernel's size, not an attribute
  return 0;
}

static void limits_record(void) {
  for (int r = 0; r < RLIM_NLIMITS; r++) getrlimit(r, &at_start.rl[r]);
  errno = 0;
  at_start.nice = getpriority(PRIO_PROCESS, 0);
  at_start.cpus_ok = sched_getaffinity(0, sizeof at_start.cpus, &at_start.cpus) == 0;
  at_start.sched_ok = sched_of(0, &at_start.sched) == 0;
  at_start.policy = sched_getscheduler(0);
  if (sched_getparam(0, &at_start.param) < 0) memset(&at_start.param, 0, sizeof at_start.param);
  at_start.ioprio = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
}

// 1 when every limit, the nice value, the affinity, the scheduling attributes and the I/O priority
// of process `pid` (0: this one) are as limits_record found them in the server; 0 too when they
// cannot be read (prlimit(2) with no new limit, getpriority(2), sched_getaffinity(2),
// sched_getattr(2) and ioprio_get(2) of another process of the uid: no dumpable check).
static int limits_kept_of(pid_t pid) {
  for (int r = 0; r < RLIM_NLIMITS; r++) {
    struct rlimit now;
    if (prlimit(pid, r, NULL, &now) < 0 || now.rlim_cur != at_start.rl[r].rlim_cur ||
        now.rlim_max != at_start.rl[r].rlim_max)
      return 0;
  }
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, (id_t)pid);
  if (nice != at_start.nice || (nice == -1 && errno)) return 0;
  cpu_set_t cpus;
  if (at_start.cpus_ok && (sched_getaffinity(pid, sizeof cpus, &cpus) < 0 || !CPU_EQUAL(&cpus, &at_start.cpus)))
    return 0;
  if (at_start.sched_ok) {
    struct sched_attr_v1 now;
    if (sched_of(pid, &now) < 0 || memcmp(&now, &at_start.sched, sizeof now) != 0) return 0;
  } else {
    struct sched_param param;
    if (sched_getscheduler(pid) != at_start.policy || sched_getparam(pid, &param) < 0 ||
        param.sched_priority != at_start.param.sched_priority)
      return 0;
  }
  if (at_start.ioprio >= 0 && syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, pid) != at_start.ioprio) return 0;
  return 1;
}

static int limits_kept(void) { return limits_kept_of(0); }

// read(2) of exactly n bytes, EINTR asked again, each read after a poll(2) that waits no later
// than `deadline` (now_ms): 0, or -1 at EOF, on an error, or past the deadline — a connection
// whose stdin never brings its request (a pipe whose write end it passed as its own stdout)
// holds no child of the server for good.
static int read_exact(int fd, char *buf, size_t n, long deadline) {
  while (n > 0) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    long left = deadline - now_ms();
    if (left <= 0) return -1;
    int ready = poll(&p, 1, (int)left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return -1;
    ssize_t got = read(fd, buf, n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return -1;
    buf += got;
    n -= (size_t)got;
  }
  return 0;
}

#define CALL_HEAD 21 // "tether-call " and LEN's 8 digits and a space

// The request line from fd 0, its newline replaced by NUL: its length, or -1 (a head that is not
// `tether-call LEN `, a LEN past CALL_LINE_MAX, EOF before LEN bytes, no newline at their end,
// not all of it within CALL_FDS_WAIT_MS).
static int call_read(char **out) {
  char head[CALL_HEAD + 1];
  long deadline = now_ms() + CALL_FDS_WAIT_MS;
  if (read_exact(0, head, CALL_HEAD, deadline) < 0 || memcmp(head, "tether-call ", 12) != 0 ||
      head[CALL_HEAD - 1] != ' ')
    return -1;
  size_t len = 0;
  for (int i = 12; i < CALL_HEAD - 1; i++) {
    if (head[i] < '0' || head[i] > '9') return -1;
    len = len * 10 + (size_t)(head[i] - '0');
  }
  if (len < 2 || len > CALL_LINE_MAX) return -1;
  char *line = malloc(CALL_HEAD + len);
  if (!line) return -1;
  memcpy(line, head, CALL_HEAD);
  if (read_exact(0, line + CALL_HEAD, len, deadline) < 0 || line[CALL_HEAD + len - 1] != '\n') return -1;
  line[CALL_HEAD + len - 1] = '\0';
  *out = line;
  return (int)(CALL_HEAD + len - 1);
}

// Splits the request's words in place (line is NUL-terminated, MAC already checked and cut):
// its kind (`run`, `ping`, `stop`), the nonce, the tag and argv (NULL-terminated, each word decoded from
// hex in place; an empty word is the empty string, as it was asked). 0, or -1.
static int call_parse(char *line, char **kind, char **nonce, char **tag, char ***argv_out) {
  size_t words = 1;
  for (char *p = line; *p; p++)
    if (*p == ' ') words++;
  // tether-call LEN KIND NONCE TAG [ARG…]
  if (words < 5) return -1;
  char **argv = calloc(words, sizeof *argv);
  if (!argv) return -1;
  char *rest = line;
  const char *word = strsep(&rest, " ");
  if (!word || strcmp(word, "tether-call") || !strsep(&rest, " ")) return -1;
  *kind = strsep(&rest, " ");
  *nonce = strsep(&rest, " ");
  *tag = strsep(&rest, " ");
  if (!*kind || !*nonce || !*tag || strlen(*nonce) != 32 || strlen(*tag) != 32) return -1;
  unsigned char scratch[16];
  if (from_hex(*nonce, 32, scratch, 16) < 0 || from_hex(*tag, 32, scratch, 16) < 0) return -1;
  size_t argc = 0;
  char *arg;
  while ((arg = strsep(&rest, " "))) {
    size_t len = strlen(arg);
    if (len % 2 || from_hex(arg, len, (unsigned char *)arg, len / 2) < 0) return -1;
    arg[len / 2] = '\0';
    if (memchr(arg, '\0', len / 2)) return -1; // a NUL inside a word cannot be an argv word
    argv[argc++] = arg;
  }
  argv[argc] = NULL;
  *argv_out = argv;
  return 0;
}

// The client was let go (call_release): its connection is closed, no status goes to it.
static int call_released;

// Lets the client go once the command's stdin has ended here: it exits (0) and its exec with it,
// while the command runs. The exec's streams are this child's and the command's then, so tether
// reads the call's end from its stdout (the end line, then the streams' close), never from the
// client's exit, and the end pays no client's and no exec's exit. Not before that stdin has ended:
// a runtime may stop carrying the stdin of an exec whose process has exited.
static void call_release(int conn) {
  if (call_released) return;
  unsigned char zero = 0;
  (void)write_all(conn, (const char *)&zero, 1);
  close(conn);
  call_released = 1;
}

// Sends `status` to the client, unless it was let go.
static void call_status(int conn, unsigned char status) {
  if (!call_released) (void)write_all(conn, (const char *)&status, 1);
}

// Writes `text` and ` MAC\n` (the MAC under the key of text) on the stream as one line, then
// sends `status` to the client, and ends this child.
static void call_end(int conn, const char *text, unsigned char status) __attribute__((noreturn));
static void call_end(int conn, const char *text, unsigned char status) {
  char line[512], mac[65];
  serve_mac(text, strlen(text), mac);
  snprintf(line, sizeof line, "%s %s\n", text, mac);
  explicit_bzero(serve_key, sizeof serve_key);
  out_fd = 1;
  (void)put_line(line);
  call_status(conn, status);
  _exit(0);
}

// Refuses the call: nothing ran. One `tether-call: refused: …` line on stderr, 125 to the client.
static void call_refuse(int conn, const char *why) __attribute__((noreturn));
static void call_refuse(int conn, const char *why) {
  fprintf(stderr, "tether-call: refused: %s: nothing ran\n", why);
  call_status(conn, 125);
  _exit(0);
}

// The command's stdin goes through this child: every byte it takes off the client's stdin is
// hashed, then written to the command's own socket, until the command ends (or the client's stdin
// does). So the end line says which of tether's bytes the command was given — a request taken off
// the client's stdin and run with another stdin ends in a line tether does not take. Bytes the
// command no longer reads (it closed its stdin) are still taken and hashed, and dropped. tether
// takes a short stdin only from a command that ended first: given the end of its input early (a
// request run with no stdin after it), a command can end as it would never end on tether's. At
// that stdin's end the client is let go (call_release).
static struct {
  crypto_hash_sha256_state h;
  unsigned long long taken;
  char buf[65536];
  size_t have, off; // bytes taken and not yet given to the command, from buf + off
  int eof;          // the client's stdin has ended: all of it was taken
} relay;

// One read of the client's stdin into the relay's buffer (empty before it), hashed; at its end the
// client is let go.
static void relay_take(int conn) {
  ssize_t r = read(0, relay.buf, sizeof relay.buf);
  if (r > 0) {
    crypto_hash_sha256_update(&relay.h, (const unsigned char *)relay.buf, (unsigned long long)r);
    relay.taken += (unsigned long long)r;
    relay.have = (size_t)r;
    relay.off = 0;
  } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
    relay.eof = 1;
    call_release(conn);
  }
}

// Before the command starts: what the client's stdin holds already, one read that does not wait.
// A call with no stdin after its request has it ended by now, and its client is let go while the
// command starts.
static void relay_begin(int conn) {
  crypto_hash_sha256_init(&relay.h);
  struct pollfd p = {.fd = 0, .events = POLLIN};
  if (poll(&p, 1, 0) == 1 && p.revents) relay_take(conn);
}

// Relays until the command `pid` ends (relay_begin first); `to` is its stdin's socket. Returns
// its wait status; relay.taken and sha (32 bytes) what was taken, relay.eof 1 when the client's
// stdin had ended by then, else 0 (the command ended first).
static int call_relay(int conn, pid_t pid, int to, unsigned char sha[32]) {
  fcntl(to, F_SETFL, fcntl(to, F_GETFL) | O_NONBLOCK);
  int pfd = pidfd_open_(pid), wstatus = 0;
  for (;;) {
    if (relay.eof && relay.have == 0 && to >= 0) {
      close(to);
      to = -1;
    }
    struct pollfd p[3];
    nfds_t n = 0;
    int at_in = -1, at_to = -1;
    if (!relay.eof && relay.have == 0) at_in = (int)n, p[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
    if (relay.have > 0 && to >= 0) at_to = (int)n, p[n++] = (struct pollfd){.fd = to, .events = POLLOUT};
    if (pfd >= 0) p[n++] = (struct pollfd){.fd = pfd, .events = POLLIN};
    // Without a pidfd (before Linux 5.3) the command's end is looked for every 20 ms.
    int ready = poll(p, n, pfd >= 0 ? -1 : 20);
    if (ready < 0 && errno != EINTR) break;
    pid_t got = waitpid(pid, &wstatus, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) break;
    if (ready <= 0) continue;
    if (at_in >= 0 && p[at_in].revents) relay_take(conn);
    if (to < 0) relay.have = 0; // the command closed its stdin: what it was given stays counted
    if (at_to >= 0 && p[at_to].revents) {
      ssize_t w = write(to, relay.buf + relay.off, relay.have);
      if (w > 0) {
        relay.off += (size_t)w;
        relay.have -= (size_t)w;
      } else if (w < 0 && errno != EINTR && errno != EAGAIN) {
        close(to); // EPIPE: the command closed its stdin; what it was given stays counted
        to = -1;
        relay.have = 0;
      }
    }
  }
  if (to >= 0) close(to);
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (pfd >= 0) close(pfd);
  crypto_hash_sha256_final(&relay.h, sha);
  return wstatus;
}

// A `session` call's cgroup (docs/sandbox.md, "One exec per sandbox.run"), as the wrapper's
// helper_cgroup makes one (programs/wrap.sh): below this child's own cgroup, named
// tether-helper.TAG.PID.START (this child's pid and start time: a name no other call had), where
// the container's cgroup v2 can be written — this cgroup's cgroup.procs and the new one's; out
// empty otherwise (read-only, no cgroup2 mount, another uid's), and the command runs without one.
// A command that kills this child leaves what it started there, where every sweep of the session
// finds it (helper-sweep.c, each_session_cgroup), an env-cleared one too.
static void in_call_cgroup(const char *tag, char *out, size_t size) {
  unsigned long long start = 0;
  own_cgroup();
  char procs[4200];
  if (!sw.own_cg[0] || read_stat(getpid(), NULL, NULL, &start) < 0 || start == 0) return;
  snprintf(procs, sizeof procs, "%s/cgroup.procs", sw.own_cg);
  if (access(procs, W_OK) < 0) return;
  int n = snprintf(out, size, "%s/tether-helper.%s.%d.%llu", sw.own_cg, tag, (int)getpid(), start);
  if (n < 0 || (size_t)n >= size || mkdir(out, 0755) < 0) {
    out[0] = '\0';
    return;
  }
  snprintf(procs, sizeof procs, "%s/cgroup.procs", out);
  if (access(procs, W_OK) < 0) {
    rmdir(out);
    out[0] = '\0';
  }
}

// A `session` call's end (sweep_in_call): the end line, which says how long the sweep's answer
// is and its SHA-256 (` swept LEN SHA256[ cgroup]`, under the MAC), then the answer.
static struct {
  int conn;
  unsigned char status;
  char text[256];
  int cgroup; // the command was born in a cgroup of its own (in_call_cgroup)
} in_call;

static void in_call_done(void) __attribute__((noreturn));
static void in_call_done(void) {
  unsigned char sha[32];
  char sha_hex[65], text[400], mac[65];
  crypto_hash_sha256(sha, (const unsigned char *)(sw.answer ? sw.answer : ""), sw.nanswer);
  to_hex(sha, sizeof sha, sha_hex);
  int n = snprintf(text, sizeof text, "%s swept %zu %s%s", in_call.text, sw.nanswer, sha_hex,
                   in_call.cgroup ? " cgroup" : "");
  serve_mac(text, (size_t)n, mac);
  explicit_bzero(serve_key, sizeof serve_key);
  // The line, then the answer: no allocation here (a lowered RLIMIT_AS must not cost the status).
  // Bytes a leftover writes between them change the answer's hash: it is then not taken.
  char line[480];
  snprintf(line, sizeof line, "%s %s\n", text, mac);
  out_fd = 1;
  if (put_line(line) == 0 && sw.nanswer) (void)put_bytes(sw.answer, sw.nanswer);
  call_status(in_call.conn, in_call.status);
  _exit(0);
}

// The session's sweep, in the call's child once its command has ended (docs/sandbox.md, "One exec
// per sandbox.run"): the helper's sweep (helper-sweep.c), its members the carriers of the tag, the
// session's cgroups and this child's children — what the command orphaned, which this subreaper
// adopted, however it detached — with their descendants; done at once when this child has no
// child left and a scan found no member (root_childless). Its answer is kept and goes after the
// end line, which says its length and hash under the MAC: one exec ends the command and sweeps
// its session, and no line of it is a session member's word. Never returns.
static void sweep_in_call(int conn, const char *text, unsigned char status, const char *nonce, const char *tag,
                          const long durations[3]) __attribute__((noreturn));
static void sweep_in_call(int conn, const char *text, unsigned char status, const char *nonce, const char *tag,
                          const long durations[3]) {
  static char name[48];
  in_call.conn = conn;
  in_call.status = status;
  snprintf(in_call.text, sizeof in_call.text, "%s", text);
  snprintf(name, sizeof name, "TETHER_SESSION_%s", tag);
  sw.tag = name;
  memcpy(sw.hex, tag, 33);
  snprintf(sw.entry, sizeof sw.entry, "%s=1", name);
  memcpy(sw.nonce, nonce, 33);
  sw.given = calloc(1, sizeof *sw.given);
  sw.proof = calloc(1, sizeof *sw.proof);
  sw.ended = calloc(1, sizeof *sw.ended);
  sw.root = getpid();
  sw.collect = 1;
  sw.done = in_call_done;
  if (!sw.given || !sw.proof || !sw.ended) in_call_done(); // an empty answer: no sweep, said so
  // Limits a process of the uid lowered on this child (prlimit(2) on the command's parent): as many
  // fds as its hard limit allows; and where they are not what the server started with, the answer
  // is not whole, whatever the scans find (a break attempt's RLIMIT_NOFILE 4 and RLIMIT_AS).
  sw.limits_changed = !limits_kept();
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  sweep_rounds(durations[0], durations[1], durations[2]);
}

// A call's command started by posix_spawnp(3) — libc's clone(CLONE_VM | CLONE_VFORK), where a
// fork would copy this child's page tables and both processes would then take a fault on each page
// they write before the exec (fork + exec + wait of `true` from a small static process: 2.1 ms,
// 1.7 ms so, on the 2-core test machine) — as the forked child below starts it: its stdin `in`, a
// POSIX session of its own, SIGPIPE and SIGCHLD at their defaults, this child's environment with
// VAR=1 (one of that name replaced). Nothing of this child's memory is written by it: this child's
// key stays, and the command's exec gives it a memory of its own. -1 where it could not be started
// so (no memory; an exec that failed, its child reaped by libc): the fork below then runs it, or
// says why it cannot.
static pid_t spawn_command(char **cmd, const char *var, int in) {
  extern char **environ;
  size_t n = 0, vlen = strlen(var);
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  char *entry = malloc(vlen + 3);
  pid_t pid = -1;
  if (!env || !entry) goto out;
  snprintf(entry, vlen + 3, "%s=1", var);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], var, vlen) || environ[i][vlen] != '=') env[k++] = environ[i];
  env[k++] = entry;
  env[k] = NULL;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&actions)) goto out;
  if (posix_spawnattr_init(&attr)) {
    posix_spawn_file_actions_destroy(&actions);
    goto out;
  }
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGCHLD);
  pid_t p;
  if (!posix_spawn_file_actions_adddup2(&actions, in, 0) && !posix_spawnattr_setsigdefault(&attr, &defaults) &&
      !posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF) &&
      posix_spawnp(&p, cmd[0], &actions, &attr, cmd, env) == 0)
    pid = p;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
out:
  free(env);
  free(entry);
  return pid;
}

// One call, in the server's child: the streams, the request, then by its kind — `ping`: the
// server is there (`tether-pong NONCE MAC`); `stop`: the server is TERMed (`tether-stopped NONCE
// MAC`); `run`: the command, its stdin relayed and hashed,
// then `tether-end NONCE exit STATUS in BYTES SHA256 eof|open MAC` after everything it wrote, and STATUS to
// the client. Never returns.
static void call_serve(int conn) __attribute__((noreturn));
static void call_serve(int conn) {
  if (call_take_streams(conn) < 0) _exit(0);
  char *line = NULL, *kind, *nonce, *tag, **cmd;
  int len = call_read(&line);
  if (len < 0 || !serve_verifies(line, (size_t)len)) call_refuse(conn, "a request that does not verify");
  line[len - 65] = '\0';
  if (call_parse(line, &kind, &nonce, &tag, &cmd) < 0) call_refuse(conn, "a malformed request");
  char text[256];
  if (!strcmp(kind, "ping")) {
    snprintf(text, sizeof text, "tether-pong %s", nonce);
    call_end(conn, text, 0);
  }
  if (!strcmp(kind, "stop")) {
    // The server is this child's parent while it runs: a parent that is gone is not signalled
    // (its pid could be another's now, the container's init too).
    if (getppid() != serve_pid || kill(serve_pid, SIGTERM) < 0) call_refuse(conn, "the server is gone");
    snprintf(text, sizeof text, "tether-stopped %s", nonce);
    call_end(conn, text, 0);
  }
  int session = !strcmp(kind, "session");
  if ((strcmp(kind, "run") && !session) || !cmd[0]) call_refuse(conn, "a malformed request");
  long durations[3] = {0, 0, 0};
  if (session) {
    // GRACE_MS KILL_AFTER_MS INTERVAL_MS, then the command.
    for (int i = 0; i < 3; i++) {
      if (!cmd[i] || !*cmd[i] || strspn(cmd[i], "0123456789") != strlen(cmd[i]) || strlen(cmd[i]) > 9)
        call_refuse(conn, "a malformed request");
      durations[i] = strtol(cmd[i], NULL, 10);
    }
    cmd += 3;
    if (!cmd[0] || durations[2] < 1) call_refuse(conn, "a malformed request");
    // What the command orphans is reparented here, whatever it did to its environment or its
    // session, and is found as this child's child by the sweep below (sweep_in_call).
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) call_refuse(conn, "it cannot be a subreaper");
  }
  static char cgdir[4200];
  cgdir[0] = '\0';
  if (session) in_call_cgroup(tag, cgdir, sizeof cgdir);
  char var[64];
  snprintf(var, sizeof var, "TETHER_SESSION_%s", tag);
  if (!limits_kept()) call_refuse(conn, "the server's limits were changed since its start");
  // A socket, not a pipe: the command is dumpable once exec'd, and a process of the uid could
  // open a pipe of its anew through /proc/PID/fd/0 and read tether's bytes away from it, as a
  // break attempt did — the relay would still count them; a socket cannot be opened so (ENXIO).
  int in[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) < 0) call_refuse(conn, "no socket for the command's stdin");
  relay_begin(conn); // the client may go while the command starts
  // Into the call's cgroup at its birth (clone3 CLONE_INTO_CGROUP): nothing the command starts is
  // ever outside it, and no process is moved — a move (a write to cgroup.procs) waits for the
  // kernel's threadgroup lock, about 15 ms of each call here; where clone3 cannot, a fork moves
  // itself.
  int moved = 0, cg = cgdir[0] ? open(cgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  // Without a cgroup to be born into, posix_spawnp starts it (spawn_command); else, or where that
  // could not, a fork.
  pid_t pid = cgdir[0] ? -1 : spawn_command(cmd, var, in[0]);
  if (pid < 0) pid = fork_into(cg, &moved); // helper.c's: a plain fork without a cgroup fd
  if (pid == 0) {
    explicit_bzero(serve_key, sizeof serve_key);
    close(conn);
    if (dup2(in[0], 0) < 0) _exit(125);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    setsid();
    if (cgdir[0] && !moved) (void)write_file(cgdir, "cgroup.procs", "0");
    setenv(var, "1", 1);
    exec_search(cmd);
    int err = errno;
    fprintf(stderr, "tether: cannot run %s: %s\n", cmd[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  close(in[0]);
  if (cg >= 0) close(cg);
  if (pid < 0) call_refuse(conn, "fork failed");
  unsigned char sha[32];
  char sha_hex[65];
  int wstatus = call_relay(conn, pid, in[1], sha);
  to_hex(sha, sizeof sha, sha_hex);
  unsigned char status =
      WIFEXITED(wstatus) ? (unsigned char)WEXITSTATUS(wstatus) : (unsigned char)(128 + WTERMSIG(wstatus));
  snprintf(text, sizeof text, "tether-end %s exit %u in %llu %s %s", nonce, status, relay.taken, sha_hex,
           relay.eof ? "eof" : "open");
  in_call.cgroup = cgdir[0] != '\0' && moved;
  if (session) sweep_in_call(conn, text, status, nonce, tag, durations);
  call_end(conn, text, status);
}

// The pre-forked call child: forked by the server ahead of the next call, so that no fork is
// between a connection and its call (one of a tiny static process is about 130 µs here). It waits
// in poll(2) on the listening socket and on its end of a socketpair with the server, and is then
// the only process that accepts: the server polls the pair, not the socket. On a connection it
// accepts, clears its parent-death signal, writes one byte on the pair (the server forks the next
// one) and is that call's child. EOF on the pair is its server's word to go (a server that ends
// shuts its end down; one that is gone closed it), and PR_SET_PDEATHSIG(SIGKILL) with the getppid(2)
// check after it ends it with a server KILLed: idle, it never outlives its server. Once it took a
// call it has none, as a call's child forked by the server had none: the call goes on whatever
// becomes of the server. What is left is the window from accept4(2) to the prctl(2) that clears
// it, two system calls long, where a server's end kills it holding a connection whose request it
// has not read: nothing ran, and the client says no status came (an unknown end), as a server
// ending with that connection in its backlog would have cut it.
#define IDLE_OUT_OF_ROOM 3 // its exit status: accept4(2) failed (out of fds or memory)
#define IDLE_TAKEN 't'

static struct {
  pid_t pid; // 0: none waits
  int sv;    // the server's end of the pair, non-blocking
} idle = {0, -1};

static void idle_wait(int lfd, int sv) __attribute__((noreturn));
static void idle_wait(int lfd, int sv) {
  serve_unblock();
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_NAME, "tether-call");
  // A server gone between the fork and the prctl sent no signal: its child is another's by then.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != serve_pid) _exit(0);
  int conn;
  for (;;) {
    struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = sv, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(0);
    }
    if (p[1].revents) _exit(0); // the server ends (EOF) or is gone: nothing else comes on the pair
    if (!p[0].revents) continue;
    conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC); // the listening socket is non-blocking
    if (conn >= 0) break;
    // Out of fds or memory (its RLIMIT_NOFILE lowered), or any error but a connection gone before
    // it was taken: the server ends instead of forking again (a pending connection keeps poll
    // ready, as it kept the server's own before).
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) _exit(IDLE_OUT_OF_ROOM);
  }
  prctl(PR_SET_PDEATHSIG, 0);
  char taken = IDLE_TAKEN;
  (void)write_all(sv, &taken, 1); // a server gone meanwhile reads nothing: the call goes on
  close(sv);
  close(lfd);
  // The server's own limits, as the server checked them before each accept4 when it accepted:
  // prlimit(2) on the server (a command may) after this child's fork is not in this child's own,
  // which call_serve checks; a server whose limits changed drops the connection (nothing ran) and
  // ends at its next look. A server no longer its parent is not asked: its calls go on.
  if (getppid() == serve_pid && !limits_kept_of(serve_pid)) _exit(0);
  call_serve(conn);
}

// Forks the next pre-forked child: 0, or -1 (no pair or no fork: the server accepts itself).
static int idle_fork(int lfd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    idle_wait(lfd, sv[1]);
  }
  close(sv[1]);
  if (pid < 0 || fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0) {
    close(sv[0]);
    if (pid > 0) { // cannot be: its EOF ends it, reaped as any child that ran no call
      idle.pid = pid;
      idle.sv = -1;
    }
    return -1;
  }
  idle.pid = pid;
  idle.sv = sv[0];
  return 0;
}

// The pre-forked child, reaped (wait status st) by the server: 1 when it took a call (its byte is
// there: it wrote it before anything of the call), else 0 — and *room 0 when it ended out of fds
// or memory. Either way none waits now.
static int idle_reaped(int st, int *room) {
  char b = 0;
  int took = idle.sv >= 0 && read(idle.sv, &b, 1) == 1 && b == IDLE_TAKEN;
  if (!took && WIFEXITED(st) && WEXITSTATUS(st) == IDLE_OUT_OF_ROOM) *room = 0;
  if (idle.sv >= 0) close(idle.sv);
  idle.pid = 0;
  idle.sv = -1;
  return took;
}

// At the server's end, by any path: the pre-forked child is told to go (its end of the pair reads
// EOF) and reaped — unless it took a call first (its byte), which goes on as any call does. One
// that does not go within a second (stopped) is ended by its PR_SET_PDEATHSIG at the server's exit.
static void idle_end(void) {
  if (idle.pid <= 0) return;
  if (idle.sv < 0) { // its pair failed at its fork: it went at once
    while (waitpid(idle.pid, NULL, 0) < 0 && errno == EINTR) {
    }
    idle.pid = 0;
    return;
  }
  shutdown(idle.sv, SHUT_WR);
  long deadline = now_ms() + 1000;
  for (;;) {
    struct pollfd p = {.fd = idle.sv, .events = POLLIN};
    long left = deadline - now_ms();
    if (left <= 0) break;
    int ready = poll(&p, 1, (int)left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char b;
    ssize_t n = read(idle.sv, &b, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) // it went: its pair's end closed at its exit
      while (waitpid(idle.pid, NULL, 0) < 0 && errno == EINTR) {
      }
    break;
  }
  close(idle.sv);
  idle.pid = 0;
  idle.sv = -1;
}

// The server's loop: a pre-forked child waits for each next connection (idle_wait), the server
// forking the next one when it takes one; where none could be forked, the server accepts and forks
// per connection itself. Ends after idle_ms without a call running or waiting, once DIR/sock is no
// longer the socket it bound (removed, replaced), or once its limits are not those of its start.
static void serve_loop(int lfd, const char *path, const struct stat *own, long idle_ms) {
  long last = now_ms();
  int running = 0, room = 1;
  // Non-blocking: an acceptor woken by poll(2) whose connection went meanwhile polls again.
  fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
  serve_block();
  for (;;) {
    if (serve_stop) break;
    pid_t done;
    int st;
    // A call's child stopped by a process of the uid (SIGSTOP: a command on its parent, or a
    // leftover on the child sweeping it) is continued: it would hold its call, and a session's
    // end, for good (a break attempt's); the pre-forked child too. Only this server's own
    // children, by waitpid(2).
    while ((done = waitpid(-1, &st, WNOHANG | WUNTRACED)) > 0) {
      if (WIFSTOPPED(st)) {
        kill(done, SIGCONT);
        continue;
      }
      if (done == idle.pid) {
        if (idle_reaped(st, &room)) last = now_ms(); // took a call and ended it before its byte was read
        continue;
      }
      running--;
    }
    if (!room) break;
    if (running) last = now_ms();
    struct stat now;
    if (stat(path, &now) < 0 || now.st_ino != own->st_ino || now.st_dev != own->st_dev) break;
    if (now_ms() - last >= idle_ms) break;
    // At every wake, not only at a connection: the next pre-forked child inherits them.
    if (!limits_kept()) break;
    if (!idle.pid && running < SERVE_CALLS_MAX) (void)idle_fork(lfd);
    if (idle.pid) {
      if (idle.sv < 0) { // went at once (idle_fork): reaped above at its SIGCHLD
        struct pollfd none = {.fd = -1};
        (void)serve_wait(&none, 1, 20);
        continue;
      }
      struct pollfd p = {.fd = idle.sv, .events = POLLIN};
      if (serve_wait(&p, 1, 1000) <= 0) continue;
      char b;
      ssize_t n = read(idle.sv, &b, 1);
      if (n == 1 && b == IDLE_TAKEN) { // a call: the child is that call's now
        close(idle.sv);
        idle.pid = 0;
        idle.sv = -1;
        running++;
        last = now_ms();
      } else if (n == 0) { // it ended without a call (killed, or out of room): reaped, its status read
        while ((done = waitpid(idle.pid, &st, 0)) < 0 && errno == EINTR) {
        }
        if (done == idle.pid) {
          (void)idle_reaped(st, &room);
        } else {
          close(idle.sv);
          idle.pid = 0;
          idle.sv = -1;
        }
      }
      continue;
    }
    // No pre-forked child: none could be forked, or SERVE_CALLS_MAX calls run. The server accepts.
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (serve_wait(&p, 1, 1000) <= 0) continue;
    int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    // Out of fds or memory (a lowered RLIMIT_NOFILE), a pending connection keeps poll ready: the
    // server ends instead of spinning, and the next call's ping starts another.
    if (conn < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) break;
    if (conn < 0) continue;
    last = now_ms();
    if (running >= SERVE_CALLS_MAX) {
      close(conn); // the client says it lost the server: an unknown end, swept
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      serve_unblock();
      close(lfd);
      signal(SIGTERM, SIG_DFL);
      signal(SIGCHLD, SIG_DFL);
      prctl(PR_SET_NAME, "tether-call");
      call_serve(conn);
    }
    if (pid > 0) running++;
    close(conn);
  }
  idle_end();
}

// Closes every fd but 0-2 and `keep`: what the start exec's shell left open (the helper's own
// file on fd 9) is not the server's to hold for its life.
static void close_others(int keep) {
  int fds[256], n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && n < (int)(sizeof fds / sizeof *fds)) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != keep && fd != dirfd(d)) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; i++) close(fds[i]);
}

static int serve_main(int argc, char **argv) {
  // Non-dumpable before it reads anything: the key it is about to hold is the proof.
  if (prctl(PR_SET_DUMPABLE, 0) < 0) {
    printf("tether-serve error dumpable %d\n", errno);
    return 125;
  }
  long idle_ms = SERVE_IDLE_MS;
  if (argc == 5 && !strcmp(argv[3], "--idle")) idle_ms = atol(argv[4]);
  if ((argc != 3 && argc != 5) || idle_ms <= 0) {
    printf("tether-serve error usage %d\n", EINVAL);
    return 125;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  signal(SIGPIPE, SIG_IGN);
  // SIGUSR1 ignored by the shell that starts the server (prelude.sh hold_pinned: its holder's
  // signal, ignored until end_hold, which comes after this exec) would stay ignored in every
  // command: a `kill -USR1` of its own then did not end one, and it said exit 0 where under the
  // wrapper it ends 138 (a break attempt's). Its default again; INT and QUIT stay ignored, as in
  // the wrapper's commands (a background job of the shell).
  signal(SIGUSR1, SIG_DFL);
  // A tracer that attached between the exec and the prctl is still attached: it could read the key.
  if (traced()) {
    printf("tether-serve error traced %d\n", errno);
    return 125;
  }
  const char *dir = argv[2];
  struct sockaddr_un addr;
  if (serve_address(dir, &addr) < 0) {
    printf("tether-serve error path %d\n", errno);
    return 125;
  }
  unsigned char spk[crypto_scalarmult_curve25519_BYTES];
  if (serve_agree(spk) < 0) return 125;
  int lfd = -1;
  if (mkdir(dir, 0700) < 0 || (lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
      bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 64) < 0) {
    printf("tether-serve error listen %d\n", errno);
    return 125;
  }
  pid_t pid = fork();
  if (pid < 0) {
    printf("tether-serve error fork %d\n", errno);
    unlink(addr.sun_path);
    rmdir(dir);
    return 125;
  }
  if (pid == 0) {
    setsid();
    // Named for ps: `tether-serve` (its argv stays the exec's, /proc/PID/fd/9 --serve DIR …).
    prctl(PR_SET_NAME, "tether-serve");
    serve_pid = getpid();
    struct sigaction term = {.sa_handler = on_stop}; // no SA_RESTART: poll(2) returns EINTR
    sigaction(SIGTERM, &term, NULL);
    // A child's stop or end wakes the loop at once (poll(2) returns EINTR), not within its second.
    struct sigaction chld = {.sa_handler = on_child};
    sigaction(SIGCHLD, &chld, NULL);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null >= 0; fd++) dup2(null, fd);
    if (null > 2) close(null);
    close_others(lfd);
    limits_record();
    struct stat own;
    if (stat(addr.sun_path, &own) == 0) {
      serve_loop(lfd, addr.sun_path, &own, idle_ms);
      // Its own socket only: a file another process put at the path is not this one's to remove.
      struct stat now;
      if (stat(addr.sun_path, &now) == 0 && now.st_ino == own.st_ino && now.st_dev == own.st_dev)
        unlink(addr.sun_path);
    }
    rmdir(dir);
    _exit(0);
  }
  unsigned long long start = 0;
  read_stat(pid, NULL, NULL, &start);
  char line[256], spk_hex[65], mac[65];
  to_hex(spk, sizeof spk, spk_hex);
  int n = snprintf(line, sizeof line, "tether-serve %s %d %llu", spk_hex, pid, start);
  serve_mac(line, (size_t)n, mac);
  explicit_bzero(serve_key, sizeof serve_key);
  printf("%s %s\n", line, mac);
  return 0;
}

#endif
