/* The kernels' own thread pool: one call runs a kernel over several ranges at once, without the GIL.
 *
 * Waking a sleeping thread costs far more on a virtual machine than the work many kernel calls split
 * (the sleeping vCPU halts and the hypervisor must run it again): Python's thread pool took 50-240 us
 * per handoff on the 2-core VM this was measured on, against 0.4 ms for the whole of a depthwise layer.
 * These workers spin for SPIN_NS after each job before they sleep, so that a run of kernel calls (a
 * network's layers) hands over in well under a microsecond, and a worker goes quiet soon after (so that
 * it does not take a core from the BLAS threads that may follow; OpenBLAS's own workers poll longer).
 * Half a millisecond: an op's single-threaded parts between two split calls (copies of its operands, a
 * strided gather) take 0.1-0.3 ms, and a worker that slept through them cost the next call its wakeup
 * (measured in make bench's alternation, 1x1 convolutions of 8 samples at stride 2, forward: 0.6-0.7 ms
 * with 0.1 ms of spinning, 0.39-0.41 ms with 0.5; the layers beside them, the thread-pool table and the
 * ops on numpy's own AVX-512 BLAS unchanged).
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
#define SPIN_NS 500000
#endif
/* Most arguments a kernel takes before its range, and most workers. */
#define MAX_ARGS 16
#define MAX_THREADS 256
/* Most ranges of one call (they count in 16 bits of the claim word below). */
#define MAX_PARTS 0xffff

typedef int64_t w_t;

typedef struct {
    void *fn;
    int has_status;           /* the kernel returns an int status (0: done); else it returns nothing */
    int64_t nargs;
    w_t args[MAX_ARGS];
    const int64_t *bounds;    /* range i is [bounds[i], bounds[i + 1]) */
    int64_t parts;
} job_t;

/* The ranges are handed out as they are taken, not fixed per thread: the caller and every worker take
 * the next untaken range until none is left. A worker that wakes late (its vCPU descheduled by the
 * hypervisor, or a core busy with another process) then costs nothing but its share, where a fixed
 * half made the whole call wait for it (on the 2-vCPU VM: a split depthwise layer slower than one
 * thread right after a pause). The job of generation g is published as `announced` = g << 16 | team
 * (workers with index + 1 >= team sit it out); `claim` = g << 32 | parts << 16 | the next range,
 * taken by compare-and-swap only while its generation is still g, so that a late worker never takes a
 * range of a later job with an earlier one's idea of it; the caller returns when `done` counts every
 * range (and only then writes the next job). */
static pthread_mutex_t submit = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time; others run alone */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static job_t job;
static _Alignas(64) atomic_uint_fast64_t announced;
static _Alignas(64) atomic_uint_fast64_t claim;
static _Alignas(64) atomic_int_fast64_t done;
static atomic_int sleepers, caller_sleeping, first_error;
static uint64_t generation;                 /* the caller's, under submit */
static int threads;                         /* workers started (in this process) */

/* Spin until done() or SPIN_NS have passed; whether done() held. */
#define SPIN_UNTIL(done) ({                                                        \
    int64_t start_ = clock_ns(), polls_ = 0;                                         \
    while (!(done) && (++polls_ % 64 != 0 || clock_ns() - start_ <= SPIN_NS)) spin_pause(); \
    (done); })

/* Run range i of the job: the kernel's status (0 for kernels without one). */
static int run_range(const job_t *j, int64_t i) {
    w_t a[MAX_ARGS + 2] = {0};
    int64_t n = j->nargs;
    for (int64_t k = 0; k < n; k++) a[k] = j->args[k];
    a[n] = j->bounds[i];
    a[n + 1] = j->bounds[i + 1];
    if (j->has_status) {
        typedef int (*status_fn)(w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t,
                                 w_t, w_t);
        return ((status_fn)j->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                                  a[12], a[13], a[14], a[15], a[16], a[17]);
    }
    typedef void (*plain_fn)(w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t, w_t,
                             w_t);
    ((plain_fn)j->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13],
                      a[14], a[15], a[16], a[17]);
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

/* Take and run ranges of the job of generation gen (its low 32 bits) until none is left or a later job
 * has replaced it. The job stays in place while a range it handed out is not done. */
static void take_ranges(uint64_t gen) {
    for (;;) {
        uint_fast64_t c = atomic_load(&claim);
        if ((c >> 32) != (gen & 0xffffffffu)) return;
        int64_t i = (int64_t)(c & 0xffff), parts = (int64_t)((c >> 16) & 0xffff);
        if (i >= parts) return;
        if (!atomic_compare_exchange_weak(&claim, &c, c + 1)) continue;
        note_error(&first_error, run_range(&job, i));       /* the job stays until range i is done */
        if (atomic_fetch_add(&done, 1) + 1 == parts && atomic_load(&caller_sleeping)) {
            pthread_mutex_lock(&sleep_lock);
            pthread_cond_broadcast(&finished);
            pthread_mutex_unlock(&sleep_lock);
        }
    }
}

static void *worker(void *arg) {
    int64_t index = (int64_t)(intptr_t)arg;          /* worker index + 1 of a team */
    uint_fast64_t seen = atomic_load(&announced);
    for (;;) {
        if (!SPIN_UNTIL(atomic_load(&announced) != seen)) {
            pthread_mutex_lock(&sleep_lock);
            atomic_fetch_add(&sleepers, 1);
            while (atomic_load(&announced) == seen) pthread_cond_wait(&wake, &sleep_lock);
            atomic_fetch_sub(&sleepers, 1);
            pthread_mutex_unlock(&sleep_lock);
        }
        seen = atomic_load(&announced);
        if (index + 1 < (int64_t)(seen & 0xffff)) take_ranges(seen >> 16);
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
        int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)threads);
        pthread_attr_destroy(&attr);
        if (failed) break;
        threads++;
    }
    return threads;
}

/* The host's OpenMP runtime (PyTorch's libgomp), when dnnbind_share_openmp was given it: GOMP_parallel
 * (what `#pragma omp parallel` compiles to) and omp_get_max_threads. Its team then runs the ranges: those
 * threads spin after every torch op, and workers of our own would fight them for the cores. */
typedef void (*gomp_parallel_t)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_query_t)(void);
static gomp_parallel_t host_parallel;
static omp_query_t host_max_threads;

typedef struct {
    const job_t *job;
    atomic_int error;
    atomic_int_fast64_t next;     /* the next range to take: the team takes them as they come too */
} team_job_t;

static void team_body(void *data) {
    team_job_t *t = data;
    for (int64_t i; (i = atomic_fetch_add(&t->next, 1)) < t->job->parts;)
        note_error(&t->error, run_range(t->job, i));
}

/* In a forked child the parent's OpenMP team does not exist: back to our own workers. */
static void forget_host(void) { host_parallel = NULL; }

/* Run every later split call on the team of the OpenMP runtime whose GOMP_parallel and
 * omp_get_max_threads these are (NULL: our own workers again). */
KERNEL int dnnbind_share_openmp(void *parallel, void *max_threads) {
    static int registered;
    if (!registered) {
        if (pthread_atfork(NULL, NULL, forget_host) != 0) return -1;
        registered = 1;
    }
    if (!parallel || !max_threads) {
        host_parallel = NULL;
        return 0;
    }
    host_max_threads = (omp_query_t)max_threads;
    host_parallel = (gomp_parallel_t)parallel;
    return 0;
}

/* Run kernel fn(args[0..nargs), lo, hi) for each range [bounds[i], bounds[i + 1]), i < parts, on up to
 * team threads (the calling one and team - 1 workers; more ranges than threads let the threads that
 * run sooner take more), and return when all are done: the first nonzero status (kernels with
 * has_status), else 0. Runs every range on the calling thread when another call holds the pool. -2:
 * more than MAX_ARGS arguments, more than MAX_PARTS ranges, or a team below one. */
KERNEL int dnnbind_parallel(void *fn, int has_status, int64_t nargs, const int64_t *args, const int64_t *bounds,
                            int64_t parts, int64_t team) {
    if (nargs < 0 || nargs > MAX_ARGS || parts < 0 || parts > MAX_PARTS || team < 1) return -2;
    job_t local = {fn, has_status, nargs, {0}, bounds, parts};
    for (int64_t k = 0; k < nargs; k++) local.args[k] = args[k];
    if (team > parts) team = parts;
    gomp_parallel_t host = host_parallel;
    if (team > 1 && host) {                  /* the host's team, as many of it as its settings allow */
        int64_t most = host_max_threads();
        team_job_t t = {&local, 0, 0};
        host(team_body, &t, (unsigned)(team < most ? team : most), 0);
        return atomic_load(&t.error);
    }
    if (team <= 1 || pthread_mutex_trylock(&submit) != 0) return run_alone(&local);
    int64_t helpers = start_workers(team - 1);        /* fewer than asked: the caller takes their share */
    team = 1 + (helpers < team - 1 ? helpers : team - 1);
    job = local;
    generation++;
    atomic_store(&first_error, 0);
    atomic_store(&done, 0);
    atomic_store(&claim, (generation & 0xffffffffu) << 32 | (uint64_t)parts << 16);
    atomic_store(&announced, generation << 16 | (uint64_t)team);
    if (team > 1 && atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&wake);
        pthread_mutex_unlock(&sleep_lock);
    }
    take_ranges(generation);
    if (!SPIN_UNTIL(atomic_load(&done) == parts)) {
        pthread_mutex_lock(&sleep_lock);
        atomic_store(&caller_sleeping, 1);
        while (atomic_load(&done) < parts) pthread_cond_wait(&finished, &sleep_lock);
        atomic_store(&caller_sleeping, 0);
        pthread_mutex_unlock(&sleep_lock);
    }
    int status = atomic_load(&first_error);
    pthread_mutex_unlock(&submit);
    return status;
}
