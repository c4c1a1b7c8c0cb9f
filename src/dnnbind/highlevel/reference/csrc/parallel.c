/* The kernels' own thread pool: one call runs a kernel over several ranges at once, without the GIL.
 *
 * Waking a sleeping thread costs far more on a virtual machine than the work many kernel calls split
 * (the sleeping vCPU halts and the hypervisor must run it again): Python's thread pool took 50-240 us
 * per handoff on the 2-core VM this was measured on, against 0.4 ms for the whole of a depthwise layer.
 * These workers spin for SPIN_NS after each job before they sleep, so that a run of kernel calls (a
 * network's layers) hands over in well under a microsecond, and a worker goes quiet soon after (so that
 * it does not take a core from the BLAS threads that may follow; OpenBLAS's own workers poll longer).
 * In a process where PyTorch runs (dnnbind.torch), the ranges run on torch's own OpenMP team instead
 * (dnnbind_share_openmp): its threads spin after every torch op, and workers of ours beside them got
 * half a core each, so that a split call waited for its slowest half.
 *
 * Every kernel the pool runs takes pointers and 64-bit integers only, its last two parameters the
 * range [lo, hi) it covers; dnnbind_parallel passes each worker the same arguments with its range.
 * (Pointers and int64_t travel in the same registers and stack slots in the x86-64 and AArch64 calling
 * conventions, which is what calling a kernel through the int64_t signature below relies on.)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "dispatch.h"

/* How long an idle worker spins before it sleeps. */
#ifndef SPIN_NS
#define SPIN_NS 100000
#endif
/* Most arguments a kernel takes before its range, and most workers. */
#define MAX_ARGS 14
#define MAX_THREADS 256

typedef int64_t w_t;

typedef struct {
    void *fn;
    int has_status;           /* the kernel returns an int status (0: done); else it returns nothing */
    int64_t nargs;
    w_t args[MAX_ARGS];
    const int64_t *bounds;    /* range i is [bounds[i], bounds[i + 1]) */
    int64_t parts;
} job_t;

/* Worker i's ticket: bumped by the caller when the worker is to run range i + 1 of the job. Only the
 * workers a job needs are handed tickets, and the caller writes the next job only after all of them
 * are done with this one. */
typedef struct {
    _Alignas(64) atomic_uint_fast64_t ticket;
} slot_t;

static pthread_mutex_t submit = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time; others run alone */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static job_t job;
static slot_t slots[MAX_THREADS];
static atomic_int sleepers, remaining, caller_sleeping, first_error;
static int threads;                         /* workers started (in this process) */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin until done() or SPIN_NS have passed; whether done() held. */
#define SPIN_UNTIL(done) ({                                                        \
    int64_t start_ = now_ns(), polls_ = 0;                                         \
    while (!(done) && (++polls_ % 64 != 0 || now_ns() - start_ <= SPIN_NS)) relax(); \
    (done); })

/* Run range i of the job: the kernel's status (0 for kernels without one). */
static int run_range(const job_t *j, int64_t i) {
    w_t a[MAX_ARGS + 2] = {0};
    int64_t n = j->nargs;
    for (int64_t k = 0; k < n; k++) a[k] = j->args[k];
    a[n] = j->bounds[i];
    a[n + 1] = j->bounds[i + 1];
    if (j->has_status) {
        typedef int (*status_fn)(w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t);
        return ((status_fn)j->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                                  a[12], a[13], a[14], a[15]);
    }
    typedef void (*plain_fn)(w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t);
    ((plain_fn)j->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13],
                      a[14], a[15]);
    return 0;
}

/* Every range on the calling thread: the first nonzero status. */
static int run_alone(const job_t *j) {
    int status = 0;
    for (int64_t i = 0; i < j->parts; i++) {
        int s = run_range(j, i);
        if (status == 0) status = s;
    }
    return status;
}

/* Keep the first nonzero status in *first. */
static void note_error(atomic_int *first, int status) {
    int expected = 0;
    if (status != 0) atomic_compare_exchange_strong(first, &expected, status);
}

static void *worker(void *arg) {
    int64_t index = (int64_t)(intptr_t)arg;          /* this worker runs range index + 1 */
    atomic_uint_fast64_t *ticket = &slots[index].ticket;
    uint_fast64_t seen = 0;                          /* start_workers set it so */
    for (;;) {
        if (!SPIN_UNTIL(atomic_load(ticket) != seen)) {
            pthread_mutex_lock(&sleep_lock);
            atomic_fetch_add(&sleepers, 1);
            while (atomic_load(ticket) == seen) pthread_cond_wait(&wake, &sleep_lock);
            atomic_fetch_sub(&sleepers, 1);
            pthread_mutex_unlock(&sleep_lock);
        }
        seen = atomic_load(ticket);
        note_error(&first_error, run_range(&job, index + 1));
        if (atomic_fetch_sub(&remaining, 1) == 1 && atomic_load(&caller_sleeping)) {
            pthread_mutex_lock(&sleep_lock);
            pthread_cond_broadcast(&finished);
            pthread_mutex_unlock(&sleep_lock);
        }
    }
    return NULL;
}

/* After fork() only the forking thread exists: the child starts its own workers when it needs them. */
static void forget_workers(void) {
    threads = 0;
    atomic_store(&sleepers, 0);
    atomic_store(&caller_sleeping, 0);
    pthread_mutex_init(&submit, NULL);
    pthread_mutex_init(&sleep_lock, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&finished, NULL);
}

static int start_workers(int64_t wanted) {
    static int registered;
    if (!registered) {
        if (pthread_atfork(NULL, NULL, forget_workers) != 0) return threads;
        registered = 1;
    }
    while (threads < wanted && threads < MAX_THREADS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        atomic_store(&slots[threads].ticket, 0);
        int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)threads);
        pthread_attr_destroy(&attr);
        if (failed) break;
        threads++;
    }
    return threads;
}

/* The host's OpenMP runtime (PyTorch's libgomp), when dnnbind_share_openmp was given it: GOMP_parallel
 * (what `#pragma omp parallel` compiles to) and the team queries. Its team then runs the ranges: those
 * threads spin after every torch op, and workers of our own would fight them for the cores. */
typedef void (*gomp_parallel_t)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_query_t)(void);
static gomp_parallel_t host_parallel;
static omp_query_t host_thread_num, host_num_threads, host_max_threads;

typedef struct {
    const job_t *job;
    atomic_int error;
} team_job_t;

static void team_body(void *data) {
    team_job_t *t = data;
    int64_t team = host_num_threads(), me = host_thread_num();
    for (int64_t i = me; i < t->job->parts; i += team)       /* a smaller team than asked covers all */
        note_error(&t->error, run_range(t->job, i));
}

/* In a forked child the parent's OpenMP team does not exist: back to our own workers. */
static void forget_host(void) { host_parallel = NULL; }

/* Run every later split call on the team of the OpenMP runtime whose GOMP_parallel, omp_get_thread_num,
 * omp_get_num_threads and omp_get_max_threads these are (all NULL: our own workers again). */
KERNEL int dnnbind_share_openmp(void *parallel, void *thread_num, void *num_threads, void *max_threads) {
    static int registered;
    if (!registered) {
        if (pthread_atfork(NULL, NULL, forget_host) != 0) return -1;
        registered = 1;
    }
    if (!parallel || !thread_num || !num_threads || !max_threads) {
        host_parallel = NULL;
        return 0;
    }
    host_thread_num = (omp_query_t)thread_num;
    host_num_threads = (omp_query_t)num_threads;
    host_max_threads = (omp_query_t)max_threads;
    host_parallel = (gomp_parallel_t)parallel;
    return 0;
}

/* Run kernel fn(args[0..nargs), lo, hi) for each range [bounds[i], bounds[i + 1]), i < parts, range 0
 * on the calling thread and the others on the workers, and return when all are done: the first
 * nonzero status (kernels with has_status), else 0. Runs every range on the calling thread when
 * another call holds the pool, and those no worker takes (more than MAX_THREADS, or threads that could
 * not be started) after its own. -2: more than MAX_ARGS arguments. */
KERNEL int dnnbind_parallel(void *fn, int has_status, int64_t nargs, const int64_t *args, const int64_t *bounds,
                            int64_t parts) {
    if (nargs < 0 || nargs > MAX_ARGS || parts < 0) return -2;
    job_t local = {fn, has_status, nargs, {0}, bounds, parts};
    for (int64_t k = 0; k < nargs; k++) local.args[k] = args[k];
    gomp_parallel_t host = host_parallel;
    if (parts > 1 && host) {                 /* the host's team, as many of it as its settings allow */
        int64_t most = host_max_threads();
        team_job_t t = {&local, 0};
        host(team_body, &t, (unsigned)(parts < most ? parts : most), 0);
        return atomic_load(&t.error);
    }
    if (parts <= 1 || pthread_mutex_trylock(&submit) != 0) return run_alone(&local);
    int64_t helpers = start_workers(parts - 1);       /* fewer than asked: the caller runs the rest */
    helpers = helpers < parts - 1 ? helpers : parts - 1;
    job = local;
    atomic_store(&first_error, 0);
    atomic_store(&remaining, (int)helpers);
    for (int64_t i = 0; i < helpers; i++) atomic_fetch_add(&slots[i].ticket, 1);
    if (helpers > 0 && atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&wake);
        pthread_mutex_unlock(&sleep_lock);
    }
    note_error(&first_error, run_range(&job, 0));
    for (int64_t i = helpers + 1; i < parts; i++) note_error(&first_error, run_range(&job, i));
    if (!SPIN_UNTIL(atomic_load(&remaining) == 0)) {
        pthread_mutex_lock(&sleep_lock);
        atomic_store(&caller_sleeping, 1);
        while (atomic_load(&remaining) > 0) pthread_cond_wait(&finished, &sleep_lock);
        atomic_store(&caller_sleeping, 0);
        pthread_mutex_unlock(&sleep_lock);
    }
    int status = atomic_load(&first_error);
    pthread_mutex_unlock(&submit);
    return status;
}
