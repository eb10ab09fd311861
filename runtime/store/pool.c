// pool.c: the host thread pool (pool.h): persistent workers, each with its
// queue of jobs, pinned where the process has CPUs to spare.
#include "runtime/store/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

// Worker k runs job k + 1 of every pool_run call, in the order the calls
// came: so the same thread touches the same range of an array each time
// (adamw_first_touch, then every update), which on a NUMA machine keeps each
// page on the node of the core that updates it. Started on first need and
// never stopped (they sleep on a condition variable between jobs). Each
// pinned to one of the process's CPUs where there are cores to spare
// (pool_pin).
typedef struct PoolTask {
    void *(*fn)(void *);
    void *arg;
    int *left; // (1) the call's jobs not yet done
    struct PoolTask *next;
} PoolTask;

typedef struct PoolWorker {
    pthread_cond_t wake;
    PoolTask *head, *tail; // its queue
} PoolWorker;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done; // broadcast when a call's last job finished
    PoolWorker **w;      // (n of cap), each allocated once and never moved
    int n, cap;
    int full; // a worker could not be started: no more are tried
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0};

static void *pool_worker_main(void *arg) {
    PoolWorker *w = arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!w->head) pthread_cond_wait(&w->wake, &pool.mu);
        PoolTask *t = w->head;
        w->head = t->next;
        if (!w->head) w->tail = NULL;
        pthread_mutex_unlock(&pool.mu);
        t->fn(t->arg);
        pthread_mutex_lock(&pool.mu);
        if (--*t->left == 0) pthread_cond_broadcast(&pool.done);
    }
    return NULL;
}

// Pins worker k to a CPU of its own: the process's allowed CPUs from the
// highest down, keeping the lowest POOL_FREE_CPUS free for the threads that
// call pool_run (the replay's engines: the host engine runs AdamW's job 0, a
// GPU's copy-out engine its adds' job 0) and for the engines that only queue
// GPU work. Workers beyond that, and every worker on a machine of
// POOL_FREE_CPUS or fewer CPUs (a shared VM), float.
enum { POOL_FREE_CPUS = 2 };
static void pool_pin(pthread_t tid, int k) {
#ifdef CPU_SET
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int ncpu = CPU_COUNT(&allowed), want = ncpu - 1 - k, seen = 0;
    if (k >= ncpu - POOL_FREE_CPUS) return;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != want) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(tid, sizeof one, &one); // best effort: unpinned if refused
        return;
    }
#else
    (void)tid, (void)k;
#endif
}

// Starts workers until there are `want` (under pool.mu); fewer when one cannot start.
static void pool_grow(int want) {
    while (pool.n < want && !pool.full) {
        if (pool.n == pool.cap) {
            int cap = pool.cap ? 2 * pool.cap : 16;
            PoolWorker **w = realloc(pool.w, (size_t)cap * sizeof *w);
            if (!w) break;
            pool.w = w, pool.cap = cap;
        }
        PoolWorker *w = calloc(1, sizeof *w);
        pthread_t tid;
        pthread_attr_t attr;
        int ok = w && pthread_cond_init(&w->wake, NULL) == 0;
        if (ok && pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            ok = pthread_create(&tid, &attr, pool_worker_main, w) == 0;
            pthread_attr_destroy(&attr);
        } else {
            ok = 0;
        }
        if (!ok) { // said once: from now on the jobs of workers that are not there run on their callers
            free(w);
            pool.full = 1;
            fprintf(stderr,
                    "mt: could start only %d host worker threads of the %d asked for; the others' share of the "
                    "optimizer runs on the calling threads\n",
                    pool.n, want);
            break;
        }
        pool_pin(tid, pool.n);
        pool.w[pool.n++] = w;
    }
}

int pool_run(void *(*fn)(void *), void *jobs, size_t size, int nt) {
    if (nt <= 1) {
        if (nt == 1) fn(jobs);
        return 0;
    }
    PoolTask *task = malloc((size_t)nt * sizeof *task); // (nt) task[i]: job i, for i >= 1
    int left = 0, here = 0;
    pthread_mutex_lock(&pool.mu);
    if (task) pool_grow(nt - 1);
    int queued = task ? (nt - 1 < pool.n ? nt - 1 : pool.n) : 0; // jobs 1 .. queued go to workers 0 .. queued - 1
    for (int i = 1; i <= queued; i++) {
        PoolWorker *w = pool.w[i - 1];
        task[i] = (PoolTask){fn, (char *)jobs + (size_t)i * size, &left, NULL};
        if (w->tail) w->tail->next = &task[i];
        else w->head = &task[i];
        w->tail = &task[i];
        left++;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&pool.mu);
    fn(jobs);
    for (int i = queued + 1; i < nt; i++) fn((char *)jobs + (size_t)i * size), here++; // no worker for them
    pthread_mutex_lock(&pool.mu);
    while (left > 0) pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    free(task);
    return here;
}
