// Baseline for the guard's tick benchmark (bench/guard.js): the files one guard tick reads, and
// nothing else, read the cheapest honest way. Found with `strace -f -e trace=openat,getdents64`
// over a tick (src/guard/guard.ts `decideAndStop`), in its order:
//   1. readdir /proc; <pid>/stat of every numeric entry (the snapshot);
//   2. <pid>/environ of every process that is not a kernel thread (PF_KTHREAD in stat's flags),
//      read whole, searched for the session prefix (findLiveSessions);
//   3. CGROUP/cgroup.procs, and a readdir of CGROUP for cgroups below it (recursively: listTargets);
//   4. STATE_FILE, the registrations (absent in the benchmark: open fails ENOENT);
//   5. /proc/uptime (ticksNow);
//   6. <pid>/cmdline of every pid of the cgroup but SKIP_PID (the user-pattern rule; the spawner
//      is spared earlier, by exec-entry, and its cmdline is not read).
// Every file through one reused buffer; /proc paths relative to one directory fd (openat).
//
//   guard-loop REPS CGROUP STATE_FILE SKIP_PID
//
// Prints one line per pass: "<cpu ms> <wall ms> <stat files> <environ files> <cgroup pids>
// <cmdlines>" — cpu is CLOCK_PROCESS_CPUTIME_ID (user + system), wall CLOCK_MONOTONIC.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "read-all.h"

#define PF_KTHREAD 0x00200000UL
#define PREFIX "TETHER_SESSION_"

static double ms_of(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// PF_KTHREAD from stat's flags (field 9: the 7th after the comm's closing paren).
static int is_kernel_thread(long len) {
  char *p = memrchr(buf, ')', (size_t)len);
  if (!p) return 0;
  buf[len < (long)cap ? len : len - 1] = 0;
  p += 2; // ") " then the state
  for (int field = 3; field < 9 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p && (strtoul(p, NULL, 10) & PF_KTHREAD) != 0;
}

static long prefixes; // session prefixes seen (keeps the search from being optimised away)

static int *cg_pids;
static size_t cg_n, cg_cap;

// cgroup.procs of dir and of every cgroup below it.
static void cgroup_visit(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  long len = read_at(AT_FDCWD, path);
  if (len < 0) return;
  buf[len < (long)cap ? len : len - 1] = 0;
  for (char *p = buf; *p;) {
    char *end;
    long pid = strtol(p, &end, 10);
    if (end == p) break;
    if (cg_n == cg_cap) {
      cg_cap = cg_cap ? cg_cap * 2 : 1024;
      cg_pids = realloc(cg_pids, cg_cap * sizeof *cg_pids);
    }
    cg_pids[cg_n++] = (int)pid;
    p = end;
    while (*p == '\n') p++;
  }
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    cgroup_visit(path);
  }
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s REPS CGROUP STATE_FILE SKIP_PID\n", argv[0]);
    return 2;
  }
  int reps = atoi(argv[1]);
  const char *cgroup = argv[2], *state = argv[3];
  int skip = atoi(argv[4]);
  buf = malloc(cap);
  if (!buf) return 1;
  size_t plen = strlen(PREFIX);
  for (int r = 0; r < reps; r++) {
    double cpu0 = ms_of(CLOCK_PROCESS_CPUTIME_ID), wall0 = ms_of(CLOCK_MONOTONIC);
    long stats = 0, environs = 0, cmdlines = 0;
    cg_n = 0;
    int procfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdopendir(dup(procfd));
    if (procfd < 0 || !d) return 1;
    struct dirent *e;
    char path[300];
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      snprintf(path, sizeof path, "%s/stat", e->d_name);
      long len = read_at(procfd, path);
      if (len < 0) continue;
      stats++;
      if (is_kernel_thread(len)) continue;
      snprintf(path, sizeof path, "%s/environ", e->d_name);
      len = read_at(procfd, path);
      if (len < 0) continue;
      environs++;
      for (char *p = buf; (p = memmem(p, (size_t)(buf + len - p), PREFIX, plen)) != NULL; p++)
        prefixes++;
    }
    closedir(d);
    cgroup_visit(cgroup);
    read_at(AT_FDCWD, state);
    read_at(procfd, "uptime");
    for (size_t i = 0; i < cg_n; i++) {
      if (cg_pids[i] <= 0 || cg_pids[i] == skip) continue;
      snprintf(path, sizeof path, "%d/cmdline", cg_pids[i]);
      if (read_at(procfd, path) >= 0) cmdlines++;
    }
    close(procfd);
    double cpu = ms_of(CLOCK_PROCESS_CPUTIME_ID) - cpu0, wall = ms_of(CLOCK_MONOTONIC) - wall0;
    printf("%.3f %.3f %ld %ld %zu %ld\n", cpu, wall, stats, environs, cg_n, cmdlines);
  }
  return prefixes < 0; // never: keeps `prefixes` live
}
