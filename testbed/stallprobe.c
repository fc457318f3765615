/* stallprobe: tells a stall of the whole VM apart from load (testbed/stallprobe.py runs it).
 *
 * One thread per core the process may use, pinned to it, at SCHED_FIFO 99, sleeps to an absolute
 * due time every PERIOD. A thread of the highest real-time priority on its own core wakes on time
 * whatever the load of the guest; when every core's thread was late at the same moment, nothing in
 * the guest ran: the hypervisor had stopped the VM (with or without reporting it as steal time).
 * Each late wake is an interval [due, woke] on its core; the main thread sweeps the intervals of all
 * cores and reports, per wall-clock second, the longest span in which every core was late at once.
 * A stall of S shows as at least S - PERIOD (a core's first wake due in it is due up to PERIOD after
 * its start).
 *
 * stdout: a header {"cores": N, "rt": true|false, "period_us": P}, then one line a second, for the
 * second that ended two seconds before (stalls that straddle it have ended by then):
 *   {"t": SECOND, "stall_ms": X, "late_max_ms": [per core], "wakes": W}
 * On SIGTERM it reports up to the last whole second, then exits.
 * rt false: real-time priority was refused; the figures are then the load's too, and the harness
 * must not read them as the machine's. Exits on SIGTERM/SIGINT, or when its parent dies.
 *
 * Usage: stallprobe [--period-us P]   (default 2000)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define RING 4096              /* late intervals kept per core (minutes of them at a few per second) */
#define LATE_NS 100000LL       /* a wake later than 0.1 ms is recorded as a late interval */
#define PRIORITY 99

typedef struct { int64_t due, woke; } interval_t;

typedef struct {
    int cpu;
    interval_t ring[RING];
    _Atomic uint64_t written;  /* intervals ever written; slot = written % RING */
    _Atomic int64_t late_max_ns[4];  /* per wall-clock second mod 4: the worst lateness of a wake */
    _Atomic int64_t wakes[4];
} core_t;

static core_t *cores;
static int ncores;
/* Sized by the cores the process may use (main): every core's intervals of the window fit, so "every
 * core late at once" is seen on a machine of any size. */
typedef struct { int64_t at; int delta; } edge_t;
static edge_t *edges;
static size_t edges_cap;
static int64_t period_ns = 2000000;
static volatile sig_atomic_t stopping;

static int64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *probe(void *arg) {
    core_t *core = arg;
    int64_t due = now_ns(CLOCK_MONOTONIC) + period_ns;
    while (!stopping) {
        struct timespec ts = {due / 1000000000LL, due % 1000000000LL};
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            continue;
        int64_t woke = now_ns(CLOCK_MONOTONIC);
        int64_t late = woke - due;
        int slot = (int)((now_ns(CLOCK_REALTIME) / 1000000000LL) & 3);
        atomic_fetch_add(&core->wakes[slot], 1);
        if (late > atomic_load(&core->late_max_ns[slot]))
            atomic_store(&core->late_max_ns[slot], late);
        if (late >= LATE_NS) {
            uint64_t n = atomic_load(&core->written);
            core->ring[n % RING] = (interval_t){due, woke};
            atomic_store_explicit(&core->written, n + 1, memory_order_release);
        }
        due += period_ns;
        if (due <= woke)  /* skip the wakes a stall swallowed */
            due += ((woke - due) / period_ns + 1) * period_ns;
    }
    return NULL;
}

static int by_time(const void *a, const void *b) {
    const edge_t *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->delta - y->delta;  /* an end before a start at the same instant: touching is not overlap */
}

/* The longest span in [from - 1 s, to + 1 s] in which every core was late at once, among the spans
 * that overlap [from, to) (monotonic ns). A core's intervals never overlap each other. */
static double stall_ms(int64_t from, int64_t to) {
    size_t n = 0, cap = edges_cap;
    for (int c = 0; c < ncores; c++) {
        uint64_t written = atomic_load_explicit(&cores[c].written, memory_order_acquire);
        uint64_t first = written > RING ? written - RING : 0;
        for (uint64_t i = first; i < written && n + 2 <= cap; i++) {
            interval_t iv = cores[c].ring[i % RING];
            if (iv.woke < from - 1000000000LL || iv.due > to + 1000000000LL)
                continue;
            edges[n++] = (edge_t){iv.due, +1};
            edges[n++] = (edge_t){iv.woke, -1};
        }
    }
    qsort(edges, n, sizeof edges[0], by_time);
    int covered = 0;
    int64_t began = 0, longest = 0;
    for (size_t i = 0; i < n; i++) {
        covered += edges[i].delta;
        if (edges[i].delta > 0 && covered == ncores) {
            began = edges[i].at;
        } else if (edges[i].delta < 0 && covered == ncores - 1) {
            int64_t ended = edges[i].at;
            if (ended > from && began < to && ended - began > longest)
                longest = ended - began;
        }
    }
    return longest / 1e6;
}

/* Prints each second from *reported + 1 to `lag` seconds before now; nonzero when stdout is gone. */
static int report(int64_t *reported, int lag) {
    int64_t real = now_ns(CLOCK_REALTIME);
    int64_t offset = real - now_ns(CLOCK_MONOTONIC);  /* realtime = monotonic + offset */
    for (int64_t second = *reported + 1; second <= real / 1000000000LL - lag; second++) {
        int slot = (int)(second & 3);
        int64_t from = second * 1000000000LL - offset;
        printf("{\"t\": %lld, \"stall_ms\": %.3f, \"late_max_ms\": [", (long long)second,
               stall_ms(from, from + 1000000000LL));
        long long wakes = 0;
        for (int c = 0; c < ncores; c++) {
            printf("%s%.3f", c ? ", " : "", atomic_exchange(&cores[c].late_max_ns[slot], 0) / 1e6);
            wakes += atomic_exchange(&cores[c].wakes[slot], 0);
        }
        printf("], \"wakes\": %lld}\n", wakes);
        *reported = second;
    }
    return fflush(stdout);
}

static void on_signal(int sig) { (void)sig; stopping = 1; }

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        long long us = 0;
        if (!strcmp(argv[i], "--period-us") && i + 1 < argc) {
            errno = 0;
            us = strtoll(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || us < 100 || us > 100000) {
                fprintf(stderr, "stallprobe: --period-us must be 100..100000\n");
                return 2;
            }
            period_ns = us * 1000LL;
        } else {
            fprintf(stderr, "usage: stallprobe [--period-us P]\n");
            return 2;
        }
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    sigset_t signals;  /* delivered to the main thread only: its sleep ends at once */
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);

    /* the machine's cores, however many (a cpu_set_t holds 1024 at most) */
    long configured = sysconf(_SC_NPROCESSORS_CONF);
    int ncpus = configured > CPU_SETSIZE ? (int)configured : CPU_SETSIZE;
    cpu_set_t *allowed = CPU_ALLOC(ncpus);
    size_t setsize = CPU_ALLOC_SIZE(ncpus);
    if (!allowed || sched_getaffinity(0, setsize, allowed)) {
        fprintf(stderr, "stallprobe: sched_getaffinity: %s\n", strerror(errno));
        return 1;
    }
    ncores = CPU_COUNT_S(setsize, allowed);
    cores = calloc((size_t)ncores, sizeof *cores);
    pthread_t *threads = calloc((size_t)ncores, sizeof *threads);
    edges_cap = 2 * (size_t)RING * (size_t)ncores;
    edges = malloc(edges_cap * sizeof *edges);
    if (ncores < 1 || !cores || !threads || !edges) {
        fprintf(stderr, "stallprobe: no cores or no memory for %d\n", ncores);
        return 1;
    }
    cpu_set_t *one = CPU_ALLOC(ncpus);
    if (!one) return 1;
    int rt = 1, k = 0;
    for (int cpu = 0; cpu < ncpus && k < ncores; cpu++) {
        if (!CPU_ISSET_S(cpu, setsize, allowed)) continue;
        cores[k].cpu = cpu;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        CPU_ZERO_S(setsize, one);
        CPU_SET_S(cpu, setsize, one);
        pthread_attr_setaffinity_np(&attr, setsize, one);
        struct sched_param param = {.sched_priority = PRIORITY};
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
        pthread_attr_setschedparam(&attr, &param);
        int err = pthread_create(&threads[k], &attr, probe, &cores[k]);
        if (err == EPERM) {  /* no real-time here: probe anyway, and say so */
            rt = 0;
            pthread_attr_setinheritsched(&attr, PTHREAD_INHERIT_SCHED);
            err = pthread_create(&threads[k], &attr, probe, &cores[k]);
        }
        pthread_attr_destroy(&attr);
        if (err) {
            fprintf(stderr, "stallprobe: thread for cpu %d: %s\n", cpu, strerror(err));
            return 1;
        }
        k++;
    }
    CPU_FREE(one);
    CPU_FREE(allowed);
    pthread_sigmask(SIG_UNBLOCK, &signals, NULL);
    printf("{\"cores\": %d, \"rt\": %s, \"period_us\": %lld}\n", ncores, rt ? "true" : "false",
           (long long)(period_ns / 1000));
    fflush(stdout);

    int64_t reported = now_ns(CLOCK_REALTIME) / 1000000000LL - 1;  /* the second before the start */
    while (!stopping) {
        int64_t real = now_ns(CLOCK_REALTIME);
        struct timespec pause = {0, 1000000000LL - real % 1000000000LL + 100000000LL};
        if (pause.tv_nsec >= 1000000000LL) { pause.tv_sec = 1; pause.tv_nsec -= 1000000000LL; }
        nanosleep(&pause, NULL);
        if (report(&reported, stopping ? 1 : 2) != 0) break;  /* the reader is gone */
    }
    stopping = 1;
    for (int c = 0; c < ncores; c++) pthread_join(threads[c], NULL);
    free(threads);
    free(edges);
    free(cores);
    return 0;
}
