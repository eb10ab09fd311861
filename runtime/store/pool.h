// pool.h: the host thread pool that the optimizer (adamw.c) and mtrun
// --calibrate's copies run their jobs on: one persistent pool of threads,
// started on first need and reused by every later call (a call costs a
// wake-up, not a thread's start).
#ifndef MT_POOL_H
#define MT_POOL_H

#include <stddef.h>

// fn on each of nt jobs, `size` bytes apart from `jobs` on; job 0 on the
// caller, job i (i >= 1) on worker i - 1 of the pool. Worker k is pinned to
// a CPU where the process has more than two (the highest first, the lowest
// two left to the threads that call); the same job index always runs on the
// same worker. Callers may call concurrently (their jobs queue per worker).
// Where a worker cannot be started, its jobs run on the caller after job 0.
// Returns when all are done: how many jobs 1 to nt - 1 ran on the caller.
int pool_run(void *(*fn)(void *), void *jobs, size_t size, int nt);

#endif
