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
#include "read-all.h"

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
