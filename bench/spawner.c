// Process factory and reaper for the benchmarks. It forks+execs `sleep` in batches, stays the
// parent of every one of them, reaps each as it exits, and kills + reaps them all when its stdin
// closes — so no benchmark process is ever left as an orphan (PID 1 may not reap them).
//
//   spawner ENTRY SLEEP_PATH SECONDS
//
// Commands on stdin, one a line:
//   S <batch> <n> <tagged 0|1> <setsid 0|1>  fork n sleeps; tagged ones get ENTRY added to the
//                                            environment; reply "S <batch> <pid> <pid> ..."
//   K <batch>                                SIGKILL what is left of the batch
// Unprompted: "G <batch> <CLOCK_MONOTONIC ns>" once the batch's last child has been reaped
// (repeated after a K of a batch already gone). EOF on stdin: SIGKILL everything, reap, exit.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_PID 4194304 /* PID_MAX_LIMIT on 64-bit */
#define MAX_BATCH 4096

static int32_t *owner;           // pid -> batch + 1 while ours and not reaped
static int live[MAX_BATCH];      // live (unreaped) children per batch
static int spawned[MAX_BATCH];   // batch was spawned
static int64_t gone_ns[MAX_BATCH];
static pid_t *pids[MAX_BATCH];
static int npids[MAX_BATCH];
static long total_live;
static sigset_t old_mask;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void reaped(pid_t pid) {
  if (pid <= 0 || pid > MAX_PID || owner[pid] == 0) return;
  int b = owner[pid] - 1;
  owner[pid] = 0;
  total_live--;
  if (--live[b] == 0) {
    gone_ns[b] = mono_ns();
    printf("G %d %lld\n", b, (long long)gone_ns[b]);
    fflush(stdout);
  }
}

static void reap_nohang(void) {
  for (;;) {
    pid_t pid = waitpid(-1, NULL, WNOHANG);
    if (pid <= 0) return;
    reaped(pid);
  }
}

static void spawn_batch(int b, int n, int tagged, int do_setsid, char **tag_env,
                        const char *sleep_path, const char *secs, int devnull) {
  pids[b] = realloc(pids[b], sizeof(pid_t) * (size_t)(npids[b] + n));
  spawned[b] = 1;
  char *args[] = {"sleep", (char *)secs, NULL};
  // Reply line built as we go: "S <batch> pid pid ...".
  size_t cap = 32 + (size_t)n * 12, len = 0;
  char *line = malloc(cap);
  len += (size_t)snprintf(line, cap, "S %d", b);
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "spawner: fork: %s after %d of batch %d\n", strerror(errno), i, b);
      break;
    }
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old_mask, NULL);
      signal(SIGPIPE, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      if (do_setsid) setsid();
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execve(sleep_path, args, tagged ? tag_env : environ);
      _exit(127);
    }
    owner[pid] = b + 1;
    live[b]++;
    total_live++;
    pids[b][npids[b]++] = pid;
    len += (size_t)snprintf(line + len, cap - len, " %d", (int)pid);
  }
  line[len++] = '\n';
  fwrite(line, 1, len, stdout);
  fflush(stdout);
  free(line);
}

static void kill_batch(int b) {
  if (live[b] == 0) {
    printf("G %d %lld\n", b, (long long)(gone_ns[b] ? gone_ns[b] : mono_ns()));
    fflush(stdout);
    return;
  }
  for (int i = 0; i < npids[b]; i++) {
    pid_t pid = pids[b][i];
    if (owner[pid] == b + 1) kill(pid, SIGKILL);
  }
}

static void kill_all_and_exit(void) {
  for (int b = 0; b < MAX_BATCH; b++) {
    for (int i = 0; i < npids[b]; i++) {
      pid_t pid = pids[b][i];
      if (owner[pid] == b + 1) kill(pid, SIGKILL);
    }
  }
  while (total_live > 0) {
    pid_t pid = waitpid(-1, NULL, 0);
    if (pid < 0) break; // ECHILD: nothing left
    reaped(pid);
  }
  exit(0);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ENTRY SLEEP_PATH SECONDS\n", argv[0]);
    return 2;
  }
  const char *entry = argv[1], *sleep_path = argv[2], *secs = argv[3];
  owner = calloc(MAX_PID + 1, sizeof *owner);
  if (!owner) return 1;

  // The tagged environment: ours plus ENTRY.
  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **tag_env = calloc(nenv + 2, sizeof *tag_env);
  memcpy(tag_env, environ, nenv * sizeof *tag_env);
  tag_env[nenv] = (char *)entry;

  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  signal(SIGPIPE, SIG_IGN); // a dead reader must not kill us before we kill our children
  signal(SIGINT, SIG_IGN);  // ^C: the bench closes our stdin instead

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 1;

  char in[4096];
  size_t inlen = 0;
  struct pollfd fds[2] = {{.fd = 0, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      kill_all_and_exit();
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      reap_nohang();
    }
    if (fds[0].revents) {
      ssize_t n = read(0, in + inlen, sizeof in - inlen - 1);
      if (n <= 0) kill_all_and_exit();
      inlen += (size_t)n;
      char *nl;
      while ((nl = memchr(in, '\n', inlen)) != NULL) {
        *nl = 0;
        int b, cnt, tagged, ss;
        if (sscanf(in, "S %d %d %d %d", &b, &cnt, &tagged, &ss) == 4 && b >= 0 && b < MAX_BATCH) {
          spawn_batch(b, cnt, tagged, ss, tag_env, sleep_path, secs, devnull);
        } else if (sscanf(in, "K %d", &b) == 1 && b >= 0 && b < MAX_BATCH) {
          kill_batch(b);
        } else {
          fprintf(stderr, "spawner: bad command: %s\n", in);
        }
        size_t used = (size_t)(nl - in) + 1;
        memmove(in, nl + 1, inlen - used);
        inlen -= used;
      }
      if (inlen == sizeof in - 1) inlen = 0; // overlong garbage line
    }
  }
}
