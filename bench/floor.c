// The physical floor of a sweep of leftovers: the least work that stops them, with no report.
// One walk of /proc: for every numeric entry, /proc/<pid>/stat then /proc/<pid>/environ read
// whole into one reused buffer (as bench/environ-loop.c in `stat` mode), ENTRY (NAME=1) matched
// as a whole NUL-delimited record; each carrier gets pidfd_open(2) + pidfd_send_signal(2)
// SIGTERM. No second scan, no waiting: the benchmark times from this program's start to the
// spawner's last reap.
//
//   floor ENTRY
//
// Prints "<CLOCK_MONOTONIC ns at start> <carriers> <signalled>".
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "read-all.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int main(int argc, char **argv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long start_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
  if (argc < 2) {
    fprintf(stderr, "usage: %s ENTRY\n", argv[0]);
    return 2;
  }
  const char *entry = argv[1];
  size_t elen = strlen(entry);
  buf = malloc(cap);
  if (!buf) return 1;
  char path[300];
  long carriers = 0, signalled = 0;
  DIR *d = opendir("/proc");
  if (!d) return 1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    if (read_all(path) < 0) continue;
    snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
    long n = read_all(path);
    if (n < 0 || !has_entry(buf, (size_t)n, entry, elen)) continue;
    carriers++;
    int fd = (int)syscall(SYS_pidfd_open, atoi(e->d_name), 0);
    if (fd < 0) continue;
    if (syscall(SYS_pidfd_send_signal, fd, SIGTERM, NULL, 0) == 0) signalled++;
    close(fd);
  }
  closedir(d);
  printf("%lld %ld %ld\n", start_ns, carriers, signalled);
  return 0;
}
