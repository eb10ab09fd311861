// calibrate.h: mtrun --calibrate, which measures this machine as the cpu
// backend sees it (memory bandwidth, the AdamW update's rate, sgemm and
// element-wise rates, cores, RAM) and writes a target profile
// (schedules/README.md) that mtc --target reads, each figure with a comment
// saying how and when it was measured.
#ifndef MT_CALIBRATE_H
#define MT_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

// The first line of every profile calibrate_run writes. It overwrites a file
// that starts with it and refuses any other.
#define CALIBRATE_MARKER "# written by mtrun --calibrate"

// Measures the machine, using threads threads (>= 1) for the memory copy (and,
// when tier_dir is not NULL, the NVMe tier on the filesystem of tier_dir: its
// free space and sequential write and read rates through runtime/store/tier.c), and
// writes the profile to path atomically (a temporary file beside it, fsync'ed,
// checked with target_load, renamed over path, the directory fsync'ed). A
// short summary goes to out (NULL: none). Returns 0, or -1 with one message
// in err (cut to errcap), "PATH: message" when a file is at fault; path is
// then untouched.
int calibrate_run(const char *path, int threads, const char *tier_dir, FILE *out, char *err, size_t errcap);

#endif
