/*
 * engine: the compiled data plane of one client node (a swarm, a player, a game server).
 *
 * Python keeps the control plane (lookups, NC reports, control messages, the migration workflows
 * and their downtime events: testbed/systems/pubsub/engine.py); this process holds every NATS
 * connection of the node and does what runs per message: open-loop publishing at due times,
 * receiving with the kernel's receive timestamp, per-producer sequence tracking, trace rows and the
 * guard's per-second health lines.
 *
 * Built on the official NATS C client (libnats, Debian's libnats-dev) in its external event loop
 * mode: no reader or flusher thread per connection; one epoll loop serves every connection, a
 * timer and the command pipe. Wakeups are budgeted: a publishing wake comes at the next due time
 * but at least a tick (--tick-us, default 1000) after the last wake, so one wake sends every
 * message due by then; after a read, data alone wakes
 * the loop again only --read-holdoff-us later (default 1000), and every wake reads what is there.
 * Messages are never sent before their due time: a message leaves at most one tick (plus the VM's
 * wake-up lateness) after it, and that lateness is measured and part of its latency, as in the
 * Python client. Receive time: the kernel's SO_TIMESTAMPNS of the newest segment queued when the
 * engine reads (peeked before libnats reads): never earlier than a message arrived, and later by at
 * most the span of what one read takes (a hold-off, when the engine is on time), not by how late
 * the engine woke.
 *
 * Commands, one per line on stdin (names, subjects and addresses contain no spaces; Python checks):
 *   netns REQ NSID PATH                      a node's network namespace (/proc/PID/ns/net), opened once
 *   connect REQ CONN URL BROKER TIMEOUT_MS NSID|-  -> "ok REQ" once connected | "err REQ why"; with NSID
 *                                            the socket is made inside that namespace, and so is every
 *                                            reconnect's: its packets leave through the node's own link
 *   sub REQ SID CONN SUBJECT                 a subscription whose messages go to Python: "msg SID LEN\n<data>"
 *   dsub REQ SID CONN SUBJECT SUBSCRIBER     a data subscription of subscriber SUBSCRIBER (trace, stats);
 *                                            its first message is told: "first SID RECEIVED_S"
 *   unsub REQ SID
 *   pub CONN SUBJECT LEN\n<data>             a message from Python (no answer)
 *   pubr CONN SUBJECT REPLY LEN\n<data>      the same with a reply subject (a request: a lookup)
 *   flush REQ CONN                           -> "ok REQ" once the server has everything sent before
 *   close REQ CONN drain|now                 drain: after a flush round trip (messages in flight arrive)
 *   subscriber REQ IDX TRACE RUN TOPIC CONSUMER SITE
 *   publisher REQ IDX SUBJECT NAME SITE RATE SIZE START_S DURATION_S
 *                                            open loop: message i due at START + i/RATE, while i/RATE < DURATION
 *   route REQ IDX CONN|-                     where publisher IDX sends; "-" holds what it produces (a
 *                                            baseline move); a route to CONN sends what was held, then
 *                                            flushes: "ok REQ" once the server has it
 *   halt REQ IDX                             publisher IDX stops producing
 *   summary REQ IDX                          -> "ok REQ {json}": a publisher's or subscriber's counts
 *   forget REQ IDX                           a subscriber that is done: its trace closed, its slot freed
 *   exit                                     flush traces and health, exit 0
 * A line holds at most 4,095 bytes; a longer one is dropped whole, up to its newline, and refused once.
 * A line that does not match its command's words (parse_command: checked integers and numbers, no NUL)
 * is refused, never run: "err REQ why", REQ 0 when the line names none. A pub's LEN is at most
 * --max-payload (engine.py passes nats-server's limit); a refused pub's data is read as lines.
 * Told without asking: "done IDX SENT" (a publisher reached its duration), "lost CONN" (a connection
 * dropped: libnats reconnects), "back CONN", "closed CONN", "gone CONN" (its slot is free: Python may
 * use the id again), "counts IDX RECEIVED BYTES" once a second per subscriber (for NC reports' rates).
 *
 * Exit codes: 0 after "exit" or at the end of stdin, 1 on an unexpected error, 2 on bad arguments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <nats/nats.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS   4096
#define MAX_SUBS    8192
#define MAX_CLIENTS 8192
#define LINE_MAX_   4096
/* The guard's lateness buckets (testbed/health.py BUCKETS_MS), one more for "above". */
static const double BUCKETS_MS[] = {0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000,
                                    5000, 10000, 30000, 60000};
#define NBUCKETS ((int)(sizeof BUCKETS_MS / sizeof BUCKETS_MS[0]) + 1)

/* `nc` and `fd` are written by libnats's threads (connect, reconnect: ev_attach, ev_detach) and by the
 * loop (conn_closed), and read by the loop: atomics, so every read sees a whole pointer, never a torn
 * or stale one (C11: plain reads and writes of an _Atomic object are sequentially consistent). */
typedef struct conn {
    int id, open, closing;
    _Atomic int fd;
    natsConnection *_Atomic nc;
    char broker[128], inbox[96];
    natsSubscription *marker;     /* flush markers come back on it */
    atomic_int want_write;
    int64_t ts_ns;                /* receive timestamp of what the last read delivered */
    struct conn *close_next;      /* in the closer's queue */
} conn_t;

/* A hole in a producer's sequence numbers: [lo, hi) not received (yet). */
typedef struct { int64_t lo, hi; } gap_t;

typedef struct {
    int64_t first, last, received, duplicates, reordered;
    int64_t lost;                 /* numbers in the holes: ProducerStats.lost of the Python client */
    gap_t *gaps;                  /* the newest MAX_GAPS holes, in order (see `see`) */
    size_t ngaps, gcap;
    char name[128];
} producer_t;

/* A file the loop appends to in memory; full buffers go to disk in the writer thread (`write_later`). */
typedef struct {
    int fd;
    char *buf;                    /* NULL: no file */
    size_t len;
} out_t;

typedef struct {
    int used, idx;
    out_t trace;
    char prefix[512], consumer_json[192], consumer_site_json[192];
    size_t prefix_len, consumer_json_len, consumer_site_json_len;
    producer_t *producers;
    size_t nproducers, cap;
    int64_t received, bytes, malformed;
    char brokers[16][128];        /* messages received through each broker (the summary's "brokers") */
    int64_t by_broker[16];
    int nbrokers;
} subscriber_t;

typedef struct {
    int used, idx, halted, done;
    char subject[256], name[128], site[128];
    double rate, start, duration;
    int size;
    int64_t seq, held_from;       /* messages [held_from, seq) were produced while routed nowhere */
    conn_t *route;
    char *buf;                    /* the message: its header, then 'x' padding up to size */
    int head_hi;                  /* the longest header written into buf so far */
} publisher_t;

typedef struct {
    int used, sid, kind;          /* 0: to Python, 1: data */
    conn_t *conn;
    natsSubscription *sub;
    int subscriber, seen;
    int broker_slot;              /* the subscriber's `brokers` entry of conn->broker; -1: not looked up yet */
} sub_t;

typedef struct pending {          /* a flush marker awaited */
    int64_t req;
    int conn, close_after;
    struct pending *next;
} pending_t;

static conn_t *conns[MAX_CONNS];
static sub_t subs[MAX_SUBS];
static subscriber_t subscribers[MAX_CLIENTS];
static publisher_t publishers[MAX_CLIENTS];
static pending_t *pendings;
static int epfd, sock_ep, evfd;   /* sock_ep: every connection's socket, polled from epfd's loop */
static int64_t read_holdoff_ns = 1000000;
static conn_t *graveyard[MAX_CONNS];   /* closed, freed once no epoll event of this wake can name them */
static int ngraves;

static int conns_hi, clients_hi, subs_hi;  /* one past the highest id in use: the loops' bounds */
static pthread_t main_thread;
static int64_t tick_ns = 1000000;
static out_t health = {.fd = -1};
static int64_t health_second;
static uint64_t hist[NBUCKETS], hist_n;
static double hist_max_ms, lag_max_ms;
static int nice_value, rt_prio;
static uint64_t seq_marker;

/* Events from libnats's threads (connects, disconnects), handed to the loop through a queue. */
typedef struct event {
    int kind, conn;               /* 1 connected, 2 connect failed, 3 lost, 4 back, 5 closed, 6 Close returned,
                                   * 7 a trace written and closed (answer req) */
    int64_t req;
    char text[512];
    struct event *next;
} event_t;
static event_t *events_head, *events_tail;
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void wake_loop(void) {
    uint64_t one = 1;
    if (write(evfd, &one, sizeof one) < 0 && errno != EAGAIN) perror("engine: eventfd");
}

static void post(int kind, int conn, int64_t req, const char *text) {
    event_t *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->kind = kind, e->conn = conn, e->req = req;
    if (text) snprintf(e->text, sizeof e->text, "%s", text);
    pthread_mutex_lock(&events_lock);
    if (events_tail) events_tail->next = e; else events_head = e;
    events_tail = e;
    pthread_mutex_unlock(&events_lock);
    wake_loop();
}

/* "-" stands for an empty word on the command line */
static const char *word(const char *s) { return strcmp(s, "-") ? s : ""; }

/* -- JSON strings ------------------------------------------------------------------------------ */
static void json_str(char *out, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) { out[0] = 0; return; }
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = c; }
        else if (c < 0x20) n += snprintf(out + n, cap - n, "\\u%04x", c);
        else out[n++] = c;
    }
    out[n++] = '"';
    out[n] = 0;
}

/* -- the event loop's callbacks (libnats may call them from its threads) ------------------------ */
static natsStatus ev_attach(void **data, void *loop, natsConnection *nc, natsSock fd) {
    conn_t *c = loop;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    if (*data && c->fd >= 0) epoll_ctl(sock_ep, EPOLL_CTL_DEL, c->fd, NULL);  /* a reconnect: new socket */
    c->fd = fd;
    c->nc = nc;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(sock_ep, EPOLL_CTL_ADD, fd, &ev) < 0) return NATS_ERR;
    *data = c;
    return NATS_OK;
}

static natsStatus ev_read(void *data, bool add) {
    conn_t *c = data;
    struct epoll_event ev = {.events = add ? EPOLLIN : 0, .data.ptr = c};
    epoll_ctl(sock_ep, EPOLL_CTL_MOD, c->fd, &ev);
    return NATS_OK;
}

/* How many connections want their buffer written: the loop scans them only when one does (a scan of
 * every connection at every wake cost MMOG's 1,200 connections ~10 % of the engine's CPU). A count
 * that stays above zero (a connection freed while wanting) only costs the scan, never a write. */
static atomic_int writes_wanted;

static natsStatus ev_write(void *data, bool add) {
    conn_t *c = data;
    int was = atomic_exchange(&c->want_write, add);
    if (add && !was) atomic_fetch_add(&writes_wanted, 1);
    else if (!add && was) atomic_fetch_sub(&writes_wanted, 1);
    if (add && !pthread_equal(pthread_self(), main_thread)) wake_loop();  /* a ping from libnats's timer */
    return NATS_OK;
}

/* What libnats buffered for every connection that asked to be written (`ev_write`). */
static void write_buffered(void) {
    for (int i = 0; i < conns_hi; i++)
        if (conns[i] && conns[i]->nc && atomic_load(&conns[i]->want_write)) natsConnection_ProcessWriteEvent(conns[i]->nc);
}

static natsStatus ev_detach(void *data) {
    conn_t *c = data;
    if (c->fd >= 0) epoll_ctl(sock_ep, EPOLL_CTL_DEL, c->fd, NULL);
    c->fd = -1;
    return NATS_OK;
}

/* libnats calls these from its callback thread, possibly after the loop freed the connection (its
 * close is told after natsConnection_Close returns): their closure is the connection's id, not it. */
#define ID_CLOSURE(id) ((void *)(intptr_t)(id))
static void on_lost(natsConnection *nc, void *closure) { (void)nc; post(3, (int)(intptr_t)closure, 0, NULL); }
static void on_back(natsConnection *nc, void *closure) { (void)nc; post(4, (int)(intptr_t)closure, 0, NULL); }
static void on_closed(natsConnection *nc, void *closure) { (void)nc; post(5, (int)(intptr_t)closure, 0, NULL); }

/* One closer thread for the engine: libnats's Close flushes with a ping round trip whose answer the
 * loop must read, so it cannot run in the loop; a thread per close cost a spawn each, and the 32
 * closes of a migration's burst, all at once, competed with the loop for the two cores (the loop
 * 10-19 ms late at 128 topics). Nobody waits for a close: the client was answered before it. */
static pthread_mutex_t close_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t close_wanted = PTHREAD_COND_INITIALIZER;
static conn_t *close_head, *close_tail;
static int closer_running;

static void *close_thread(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&close_lock);
        while (!close_head) pthread_cond_wait(&close_wanted, &close_lock);
        conn_t *c = close_head;
        close_head = c->close_next;
        if (!close_head) close_tail = NULL;
        pthread_mutex_unlock(&close_lock);
        natsConnection_Close(c->nc);
        post(6, c->id, 0, NULL);
    }
    return NULL;
}

/* Queue `c` for the closer (started on the first close); 0 when no closer thread could start. */
static int close_later(conn_t *c) {
    pthread_mutex_lock(&close_lock);
    if (!closer_running) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        closer_running = pthread_create(&t, &attr, close_thread, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (closer_running) {
        c->close_next = NULL;
        if (close_tail) close_tail->close_next = c; else close_head = c;
        close_tail = c;
        pthread_cond_signal(&close_wanted);
    }
    pthread_mutex_unlock(&close_lock);
    return closer_running;
}

/* -- the writer: traces and health lines reach the disk from a thread of their own ---------------
 * A write(2) to ext4 can wait for the journal or for writeback: 8-38 ms measured at the paper's load,
 * in which the loop published nothing and read nothing. The loop fills 64 KiB buffers; this thread
 * writes them in the order they were handed over, and closes a file after its last buffer (a
 * subscriber's "forget" is answered only then: its trace is complete when Python reads it). */
#define OUT_CAP (1 << 16)
typedef struct chunk {
    int fd;
    char *data;
    size_t len;
    int64_t close_req;            /* 0: more to come; > 0: close, then answer this request; < 0: close */
    struct chunk *next;
} chunk_t;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t write_wanted = PTHREAD_COND_INITIALIZER;
static chunk_t *write_head, *write_tail;
static int writer_stopping, writer_running;
static pthread_t writer;

static void *write_thread(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&write_lock);
        while (!write_head && !writer_stopping) pthread_cond_wait(&write_wanted, &write_lock);
        chunk_t *c = write_head;
        write_head = write_tail = NULL;
        pthread_mutex_unlock(&write_lock);
        if (!c) return NULL;              /* stopping, and everything written */
        while (c) {
            for (size_t done = 0; done < c->len;) {
                ssize_t n = write(c->fd, c->data + done, c->len - done);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    fprintf(stderr, "engine: writing a trace or health file failed: %s\n", strerror(errno));
                    break;
                }
                done += n;
            }
            free(c->data);
            if (c->close_req) {
                if (close(c->fd)) fprintf(stderr, "engine: closing a trace or health file: %s\n", strerror(errno));
                if (c->close_req > 0) post(7, 0, c->close_req, NULL);
            }
            chunk_t *next = c->next;
            free(c);
            c = next;
        }
    }
}

static void write_later(int fd, char *data, size_t len, int64_t close_req) {
    chunk_t *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->fd = fd, c->data = data, c->len = len, c->close_req = close_req;
    pthread_mutex_lock(&write_lock);
    if (!writer_running) writer_running = pthread_create(&writer, NULL, write_thread, NULL) == 0;
    if (!writer_running) abort();
    if (write_tail) write_tail->next = c; else write_head = c;
    write_tail = c;
    pthread_cond_signal(&write_wanted);
    pthread_mutex_unlock(&write_lock);
}

static int out_open(out_t *o, const char *path) {
    o->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (o->fd < 0) return -1;
    if (!(o->buf = malloc(OUT_CAP))) abort();
    o->len = 0;
    return 0;
}

/* What the buffer holds, to the writer (a fresh buffer takes its place). */
static void out_flush(out_t *o) {
    if (!o->buf || !o->len) return;
    write_later(o->fd, o->buf, o->len, 0);
    if (!(o->buf = malloc(OUT_CAP))) abort();
    o->len = 0;
}

static void out_append(out_t *o, const char *data, size_t len) {
    if (o->len + len > OUT_CAP) out_flush(o);
    memcpy(o->buf + o->len, data, len);
    o->len += len;
}

/* The rest to the writer, then the file closed there; `req` > 0 is answered once it is. */
static void out_close(out_t *o, int64_t req) {
    if (!o->buf) return;
    write_later(o->fd, o->buf, o->len, req > 0 ? req : -1);
    o->buf = NULL, o->len = 0, o->fd = -1;
}

/* Everything handed over is on disk when this returns (the end of the process). */
static void writer_stop(void) {
    pthread_mutex_lock(&write_lock);
    writer_stopping = 1;
    int running = writer_running;
    pthread_cond_signal(&write_wanted);
    pthread_mutex_unlock(&write_lock);
    if (running) pthread_join(writer, NULL);
}

typedef struct {
    conn_t *conn;
    int64_t req;
    char url[256];
    int timeout_ms;
    int netns;                    /* index in netns_fds, or -1: the engine's own namespace */
} connect_job_t;

/* The namespaces of the nodes whose clients this engine serves (one engine for every client node of a
 * machine: testbed/systems/pubsub/clienthost.py). setns(2) moves only the calling thread, and a socket
 * stays in the namespace it was made in: a connect thread enters the node's namespace before libnats
 * makes the socket. Slots are written once, by the loop, before any connect names them. */
#define MAX_NETNS 4096
static int netns_fds[MAX_NETNS];
static int netns_count;

static int enter_netns(int index) {
    return index < 0 ? 0 : setns(netns_fds[index], CLONE_NEWNET);
}

/* libnats reconnects in a thread of its own, made anew for each outage, and asks this before every
 * attempt (one server per connection): the thread enters the node's namespace first. The wait is
 * libnats's own default (200 ms and up to 100 ms of jitter, as the other connections' options). */
static int64_t reconnect_wait(natsConnection *nc, int attempts, void *closure) {
    (void)nc, (void)attempts;
    if (enter_netns((int)(intptr_t)closure - 1)) perror("engine: setns before a reconnect");
    return 200 + rand() % 100;
}

/* A connect blocks for a round trip (or its timeout, for a broker that is gone): it runs in a
 * thread of its own, so the other clients of the node keep publishing meanwhile. */
static void *connect_thread(void *arg) {
    connect_job_t *job = arg;
    natsOptions *opts = NULL;
    natsConnection *nc = NULL;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK) s = natsOptions_SetURL(opts, job->url);
    if (s == NATS_OK) s = natsOptions_SetTimeout(opts, job->timeout_ms);
    if (s == NATS_OK) s = natsOptions_SetEventLoop(opts, job->conn, ev_attach, ev_read, ev_write, ev_detach);
    if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true);              /* no flusher thread */
    /* as the Python client (client.connect_nats): a paused broker counts as lost in ~2-3 s, and a
     * connection that was up reconnects forever every 0.2 s */
    if (s == NATS_OK) s = natsOptions_SetPingInterval(opts, 1000);
    if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(opts, 2);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 200);
    if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(opts, on_lost, ID_CLOSURE(job->conn->id));
    if (s == NATS_OK) s = natsOptions_SetReconnectedCB(opts, on_back, ID_CLOSURE(job->conn->id));
    if (s == NATS_OK) s = natsOptions_SetClosedCB(opts, on_closed, ID_CLOSURE(job->conn->id));
    if (s == NATS_OK && job->netns >= 0)
        s = natsOptions_SetCustomReconnectDelay(opts, reconnect_wait, ID_CLOSURE(job->netns + 1));
    if (s == NATS_OK && enter_netns(job->netns)) {
        char why[512];
        snprintf(why, sizeof why, "%s: setns: %s", job->url, strerror(errno));
        post(2, job->conn->id, job->req, why);
        natsOptions_Destroy(opts);
        free(job);
        return NULL;
    }
    if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
    if (s == NATS_OK) {
        job->conn->nc = nc;
        post(1, job->conn->id, job->req, NULL);
    } else {
        char why[512];
        snprintf(why, sizeof why, "%s: %s", job->url, nats_GetLastError(&s) ?: natsStatus_GetText(s));
        post(2, job->conn->id, job->req, why);
    }
    natsOptions_Destroy(opts);
    free(job);
    return NULL;
}

/* -- output to Python ---------------------------------------------------------------------------- */
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

/* "err REQ why" (REQ 0: a line that named none) in printable ASCII: what Python reads is text. */
static void refuse(int64_t req, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (char *p = why; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '?';
    say("err %" PRId64 " %s", req, why);
}

/* -- health: the guard's per-second lines ------------------------------------------------------- */
static void health_roll(int64_t now) {
    int64_t second = now / 1000000000LL;
    if (second == health_second) return;
    if (health.buf && (hist_n || lag_max_ms > 0)) {
        char line[1024];
        size_t n = snprintf(line, sizeof line, "{\"s\":%" PRId64 ",\"hist\":{\"n\":%" PRIu64 ",\"max_ms\":%.3f,\"counts\":[",
                            health_second, hist_n, hist_max_ms);
        for (int i = 0; i < NBUCKETS && n < sizeof line; i++)
            n += snprintf(line + n, sizeof line - n, i ? ",%" PRIu64 : "%" PRIu64, hist[i]);
        if (n < sizeof line)
            n += snprintf(line + n, sizeof line - n, "]},\"loop_lag_max_ms\":%.3f,\"engine\":true}\n", lag_max_ms);
        if (n < sizeof line) {
            out_append(&health, line, n);
            out_flush(&health);
        }
    }
    memset(hist, 0, sizeof hist);
    hist_n = 0, hist_max_ms = 0, lag_max_ms = 0;
    health_second = second;
}

static void late(double ms) {
    if (ms < 0) ms = 0;
    int i = 0;
    while (i < NBUCKETS - 1 && ms > BUCKETS_MS[i]) i++;   /* bisect_left */
    hist[i]++, hist_n++;
    if (ms > hist_max_ms) hist_max_ms = ms;
}

/* -- connections --------------------------------------------------------------------------------- */
static conn_t *conn_get(int id) {
    conn_t *c = id >= 0 ? conns[id % MAX_CONNS] : NULL;
    return c && c->id == id && !c->closing ? c : NULL;
}

static void send_marker(conn_t *c, int64_t req, int close_after) {
    pending_t *p = calloc(1, sizeof *p);
    if (!p) abort();
    p->req = req, p->conn = c->id, p->close_after = close_after, p->next = pendings;
    pendings = p;
    char body[32];
    int n = snprintf(body, sizeof body, "%" PRId64, req);
    natsConnection_Publish(c->nc, c->inbox, body, n);
}

static void conn_closed(conn_t *c);

/* The connection's slot is free (its memory once no epoll event of this wake can name it); Python may
 * give its id to a new connection: ids stay below MAX_CONNS, and the loops' bounds stay small, with
 * one engine for every client node of a machine opening thousands over a run. */
static void conn_freed(conn_t *c) {
    conns[c->id % MAX_CONNS] = NULL;
    graveyard[ngraves++] = c;
    say("gone %d", c->id);
}

static void conn_close(conn_t *c) {
    for (int i = 0; i < subs_hi; i++)
        if (subs[i].used && subs[i].conn == c) {
            natsSubscription_Destroy(subs[i].sub);
            subs[i].used = 0;
        }
    for (int i = 0; i < clients_hi; i++)
        if (publishers[i].used && publishers[i].route == c) {
            publishers[i].route = NULL;                       /* holds until routed again */
            publishers[i].held_from = publishers[i].seq;
        }
    if (c->marker) natsSubscription_Destroy(c->marker);
    c->marker = NULL;
    if (!c->nc) {
        conn_freed(c);
        return;
    }
    /* libnats's Close flushes with a ping round trip first, whose answer this loop must read: the
     * closer thread does it (in the loop's thread it blocked the node's every client for 0.5 s). */
    c->closing = 1;
    if (!close_later(c)) {
        natsConnection_Close(c->nc);
        conn_closed(c);
    }
}

/* Closing ends here, in the loop: the connection's memory is released once libnats is done with it. */
static void conn_closed(conn_t *c) {
    natsConnection_Destroy(c->nc);
    c->nc = NULL;
    conn_freed(c);
}

/* -- subscribers ----------------------------------------------------------------------------------- */
/* A subscriber keeps at most MAX_PRODUCERS producers (each with its holes, MAX_GAPS at most): past
 * that, messages of new names are counted malformed, so a peer inventing names cannot grow the engine
 * without bound. */
#define MAX_PRODUCERS 4096
#define SEQ_MAX (INT64_MAX / 4)

static producer_t *producer_of(subscriber_t *s, const char *name, size_t len) {
    for (size_t i = 0; i < s->nproducers; i++)
        if (strlen(s->producers[i].name) == len && !memcmp(s->producers[i].name, name, len)) return &s->producers[i];
    if (len >= sizeof s->producers[0].name || s->nproducers >= MAX_PRODUCERS) return NULL;
    if (s->nproducers == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->producers = realloc(s->producers, s->cap * sizeof *s->producers);
        if (!s->producers) abort();
    }
    producer_t *p = &s->producers[s->nproducers++];
    memset(p, 0, sizeof *p);
    memcpy(p->name, name, len);
    p->first = p->last = -1;
    return p;
}

/* Holes are kept as ranges, so memory grows with the number of holes, never with their size (one
 * message numbered 1e12 is one hole, not 1e12 entries). At most MAX_GAPS are kept, the newest (a
 * message arrives late into a recent hole, if at all): past that a peer is punching holes on
 * purpose, and the oldest is forgotten; `lost` still counts its numbers, and one of them arriving
 * after all is then counted a duplicate, not reordered. Every change costs at most one memmove of
 * MAX_GAPS entries. */
#define MAX_GAPS 1024

static void gap_insert(producer_t *p, size_t at, int64_t lo, int64_t hi) {
    if (p->ngaps == MAX_GAPS) {                       /* forget the oldest hole */
        if (at == 0) return;                          /* the new one would be it */
        memmove(p->gaps, p->gaps + 1, --p->ngaps * sizeof *p->gaps);
        at--;
    }
    if (p->ngaps == p->gcap) {
        p->gcap = p->gcap ? p->gcap * 2 : 16;
        p->gaps = realloc(p->gaps, p->gcap * sizeof *p->gaps);
        if (!p->gaps) abort();
    }
    memmove(p->gaps + at + 1, p->gaps + at, (p->ngaps - at) * sizeof *p->gaps);
    p->gaps[at] = (gap_t){lo, hi};
    p->ngaps++;
}

/* A hole [lo, hi) below every hole kept (at_end 0) or above (1). */
static void missing_add(producer_t *p, int64_t lo, int64_t hi, int at_end) {
    if (lo >= hi) return;
    p->lost += hi - lo;
    gap_insert(p, at_end ? p->ngaps : 0, lo, hi);
}

/* 1 if `seq` was in a hole kept (and is no longer missing). */
static int missing_take(producer_t *p, int64_t seq) {
    size_t lo = 0, hi = p->ngaps;
    while (lo < hi) {                                 /* the first hole that ends after seq */
        size_t mid = lo + (hi - lo) / 2;
        if (p->gaps[mid].hi <= seq) lo = mid + 1; else hi = mid;
    }
    if (lo == p->ngaps || p->gaps[lo].lo > seq) return 0;
    gap_t *g = &p->gaps[lo];
    p->lost--;
    if (g->lo == seq) g->lo++;
    else if (g->hi == seq + 1) g->hi--;
    else {                                            /* split: [lo, seq) and [seq + 1, hi) */
        int64_t end = g->hi;
        g->hi = seq;
        gap_insert(p, lo + 1, seq + 1, end);
        return 1;
    }
    if (g->lo == g->hi) memmove(g, g + 1, (--p->ngaps - lo) * sizeof *p->gaps);
    return 1;
}

/* ProducerStats.see of the Python client: 0 for a duplicate. */
static int see(producer_t *p, int64_t seq) {
    if (p->received == 0 && p->first < 0) {
        p->first = p->last = seq, p->received = 1;
        return 1;
    }
    if (seq > p->last) {
        if (seq > p->last + 1) missing_add(p, p->last + 1, seq, 1);
        p->last = seq;
    } else if (missing_take(p, seq)) {
        p->reordered++;
    } else if (seq < p->first) {
        missing_add(p, seq + 1, p->first, 0);
        p->first = seq;
        p->reordered++;
    } else {
        p->duplicates++;
        return 0;
    }
    p->received++;
    return 1;
}

/* A member's value in a message's header line: where it starts and how long it is; a string without
 * its quotes (still escaped). */
typedef struct {
    const char *v;
    size_t len;
} span_t;

/* The members of a message's header line (what Publisher.payload and publish_one write: a flat JSON
 * object of strings and numbers), found in one pass; members not there stay {NULL, 0}. 0 if the
 * line is not such an object. */
static int header_members(const char *h, size_t len, span_t *id, span_t *seq, span_t *t, span_t *p, span_t *s) {
    const char *c = h, *e = h + len;
    if (c == e || *c++ != '{') return 0;
    while (c < e && *c == '"') {
        const char *k = ++c;
        while (c < e && *c != '"') c += *c == '\\' ? 2 : 1;
        if (c >= e) return 0;
        size_t klen = c++ - k;
        if (c >= e || *c++ != ':') return 0;
        span_t v = {c, 0};
        if (c < e && *c == '"') {
            v.v = ++c;
            while (c < e && *c != '"') c += *c == '\\' ? 2 : 1;
            if (c >= e) return 0;
            v.len = c++ - v.v;
        } else {
            while (c < e && *c != ',' && *c != '}') c++;
            v.len = c - v.v;
        }
        span_t *slot = klen == 1 ? (*k == 't' ? t : *k == 'p' ? p : *k == 's' ? s : NULL)
                     : klen == 2 && !memcmp(k, "id", 2) ? id : klen == 3 && !memcmp(k, "seq", 3) ? seq : NULL;
        if (slot) *slot = v;
        if (c >= e || *c++ != ',') break;
    }
    return 1;
}

/* libnats hands every destroyed message to its garbage-collector thread and wakes it: one more
 * wakeup (and lock hand-over) per read, measured as the engine's largest cost after the kernel's.
 * Messages are destroyed in batches instead, every DESTROY_EVERY_NS, so that thread wakes ~20 times
 * a second. */
#define DESTROY_EVERY_NS 50000000LL
static natsMsg **doomed;
static size_t ndoomed, doomed_cap;

static void destroy_later(natsMsg *m) {
    if (ndoomed == doomed_cap) {
        doomed_cap = doomed_cap ? doomed_cap * 2 : 1024;
        doomed = realloc(doomed, doomed_cap * sizeof *doomed);
        if (!doomed) abort();
    }
    doomed[ndoomed++] = m;
}

static void destroy_doomed(void) {
    for (size_t i = 0; i < ndoomed; i++) natsMsg_Destroy(doomed[i]);
    ndoomed = 0;
}

/* -- a trace row, put together without printf (ROW_MAX holds the longest: its strings are capped) -- */
#define ROW_MAX 1024
static void row_put(char *row, size_t *n, const char *s, size_t len) {
    if (*n + len > ROW_MAX - 8) len = *n < ROW_MAX - 8 ? ROW_MAX - 8 - *n : 0;
    memcpy(row + *n, s, len);
    *n += len;
}

#define row_lit(row, n, literal) row_put(row, n, literal, sizeof literal - 1)

/* `s` (len bytes, at most 150 of them) as a JSON string, as json_str writes it */
static void row_json(char *row, size_t *n, const char *s, size_t len) {
    char out[160 * 6 + 3];
    size_t k = 0;
    if (len > 150) len = 150;
    out[k++] = '"';
    for (size_t i = 0; i < len && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { out[k++] = '\\'; out[k++] = c; }
        else if (c < 0x20) k += snprintf(out + k, sizeof out - k, "\\u%04x", c);
        else out[k++] = c;
    }
    out[k++] = '"';
    row_put(row, n, out, k);
}

static void row_i64(char *row, size_t *n, int64_t v) {
    char digits[24];
    int k = sizeof digits;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do digits[--k] = '0' + u % 10; while (u /= 10);
    if (v < 0) digits[--k] = '-';
    row_put(row, n, digits + k, sizeof digits - k);
}

/* microseconds as seconds with six decimals ("%.6f") */
static void row_micros(char *row, size_t *n, int64_t us) {
    if (us < 0) { row_put(row, n, "-", 1); us = -us; }
    row_i64(row, n, us / 1000000);
    char frac[8] = {'.'};
    int64_t f = us % 1000000;
    for (int i = 6; i >= 1; i--, f /= 10) frac[i] = '0' + f % 10;
    row_put(row, n, frac, 7);
}

/* a double of seconds as "%.6f" writes it, exactly (round half to even on the binary value), without
 * printf: its fraction is m / 2^52 for an integer m once the seconds are at least 1 */
static void row_seconds(char *row, size_t *n, double t) {
    if (!(t >= 1.0 && t < 4503599627370496.0)) {
        char text[64];
        int k = snprintf(text, sizeof text, "%.6f", t);
        row_put(row, n, text, k > 0 && k < (int)sizeof text ? (size_t)k : 0);
        return;
    }
    double whole = floor(t);
    uint64_t m = (uint64_t)ldexp(t - whole, 52);            /* exact: t - whole is a multiple of 2^-52 */
    unsigned __int128 scaled = (unsigned __int128)m * 1000000u;
    uint64_t us = (uint64_t)(scaled >> 52), rest = (uint64_t)(scaled & ((1ULL << 52) - 1));
    if (rest > (1ULL << 51) || (rest == (1ULL << 51) && (us & 1))) us++;
    int64_t seconds = (int64_t)whole;
    if (us == 1000000) seconds++, us = 0;
    row_micros(row, n, seconds * 1000000 + (int64_t)us);
}

/* A message's string (or none) that a trace row can hold as it is: printable ASCII, at most `max` bytes. */
static int text_span(const char *v, size_t len, size_t max) {
    if (!v) return 1;
    if (len > max) return 0;
    for (size_t i = 0; i < len; i++)
        if (v[i] < 0x20 || v[i] > 0x7e) return 0;
    return 1;
}

static void deliver(sub_t *sb, natsMsg *m, int64_t received_ns) {
    subscriber_t *s = &subscribers[sb->subscriber];
    const char *data = natsMsg_GetData(m);
    int len = natsMsg_GetDataLength(m);
    const char *nl = memchr(data, '\n', len);
    size_t hl = nl ? (size_t)(nl - data) : (size_t)len;
    span_t id = {0}, seqs = {0}, ts = {0}, ps = {0}, ss = {0};
    char num[64];
    if (!header_members(data, hl, &id, &seqs, &ts, &ps, &ss) || !ps.v || !seqs.v || !ts.v || seqs.len >= sizeof num
        || ts.len >= sizeof num) {
        s->malformed++;
        return;
    }
    const char *pv = ps.v, *seqv = seqs.v, *tv = ts.v, *sv = ss.v, *idv = id.v;
    size_t plen = ps.len, seqlen = seqs.len, tlen = ts.len, slen = ss.len, idlen = id.len;
    /* the strings go into trace rows and summaries whole (row_json keeps 150 bytes: a longer escaped
     * string could be cut inside an escape) and must read as text there */
    if (!text_span(pv, plen, 127) || !text_span(sv, slen, 150) || !text_span(idv, idlen, 150)) {
        s->malformed++;
        return;
    }
    memcpy(num, seqv, seqlen); num[seqlen] = 0;
    char *endp;
    errno = 0;
    int64_t seq = strtoll(num, &endp, 10);
    /* a publisher numbers from 0; past SEQ_MAX a hole's bounds could overflow */
    if (errno || endp == num || *endp || seq < 0 || seq > SEQ_MAX) { s->malformed++; return; }
    memcpy(num, tv, tlen); num[tlen] = 0;
    double sent = strtod(num, &endp);
    if (endp == num || *endp || !isfinite(sent)) { s->malformed++; return; }
    if (!sb->seen) {
        sb->seen = 1;
        say("first %d %.6f", sb->sid, received_ns / 1e9);
    }
    producer_t *p = producer_of(s, pv, plen);
    if (!p) { s->malformed++; return; }
    if (!see(p, seq)) return;
    s->received++;
    s->bytes += len;
    if (sb->broker_slot < 0) {
        int b = 0;
        while (b < s->nbrokers && strcmp(s->brokers[b], sb->conn->broker)) b++;
        if (b == s->nbrokers && b < 16) snprintf(s->brokers[s->nbrokers++], sizeof s->brokers[0], "%s", sb->conn->broker);
        sb->broker_slot = b;
    }
    if (sb->broker_slot < 16) s->by_broker[sb->broker_slot]++;
    if (!s->trace.buf) return;
    /* TraceWriter.write_delivery's row, column for column (trace_schema.FIELDS), put together by hand:
     * printf's float formatting was a fifth of the engine's CPU at the paper's load */
    char row[1024];
    size_t n = 0;
    row_put(row, &n, s->prefix, s->prefix_len);
    row_json(row, &n, pv, plen);
    row_lit(row, &n, ",\"consumer\":");
    row_put(row, &n, s->consumer_json, s->consumer_json_len);
    row_lit(row, &n, ",\"msg_id\":");
    if (idv) row_json(row, &n, idv, idlen);
    else {                                   /* "producer:seq", as the Python client makes it */
        char raw[160];
        int k = snprintf(raw, sizeof raw, "%.*s:%" PRId64, (int)plen, pv, seq);
        row_json(row, &n, raw, k < (int)sizeof raw ? (size_t)k : sizeof raw - 1);
    }
    row_lit(row, &n, ",\"track_id\":null,\"seq\":");
    row_i64(row, &n, seq);
    row_lit(row, &n, ",\"send_time\":\"");
    row_seconds(row, &n, sent);
    row_lit(row, &n, "\",\"receive_time\":\"");
    row_micros(row, &n, (received_ns + 500) / 1000);
    row_lit(row, &n, "\",\"broker\":");
    row_json(row, &n, sb->conn->broker, strlen(sb->conn->broker));
    row_lit(row, &n, ",\"producer_site\":");
    row_json(row, &n, sv ? sv : "", sv ? slen : 0);
    row_lit(row, &n, ",\"consumer_site\":");
    row_put(row, &n, s->consumer_site_json, s->consumer_site_json_len);
    row_lit(row, &n, "}\n");
    out_append(&s->trace, row, n);
}

/* -- publishers ---------------------------------------------------------------------------------- */
static int64_t due_ns(publisher_t *p, int64_t seq) {
    return (int64_t)llround((p->start + (double)seq / p->rate) * 1e9);
}

/* The message (Publisher.payload's header line, padded to size), put together without printf: its
 * float formatting was the largest of the engine's own costs per message published. The padding is
 * written once (the buffer starts as 'x'), again only where a longer header was before. */
static void publish_one(publisher_t *p, conn_t *c, int64_t seq) {
    char head[ROW_MAX];
    size_t n = 0, name_len = strnlen(p->name, sizeof p->name);
    row_lit(head, &n, "{\"id\":\"");
    row_put(head, &n, p->name, name_len);
    row_lit(head, &n, ":");
    row_i64(head, &n, seq);
    row_lit(head, &n, "\",\"seq\":");
    row_i64(head, &n, seq);
    row_lit(head, &n, ",\"t\":");
    row_seconds(head, &n, p->start + (double)seq / p->rate);
    row_lit(head, &n, ",\"p\":\"");
    row_put(head, &n, p->name, name_len);
    row_lit(head, &n, "\",\"s\":\"");
    row_put(head, &n, p->site, strnlen(p->site, sizeof p->site));
    row_lit(head, &n, "\"}\n");
    memcpy(p->buf, head, n);
    if ((int)n < p->head_hi) memset(p->buf + n, 'x', p->head_hi - n);
    if ((int)n > p->head_hi) p->head_hi = n;
    natsConnection_Publish(c->nc, p->subject, p->buf, (int)n < p->size ? p->size : (int)n);
}

static int producing(publisher_t *p, int64_t seq) {
    return p->used && !p->halted && !p->done && (double)seq / p->rate < p->duration;
}

static int64_t publish_due(int64_t now) {
    int64_t next = INT64_MAX;
    for (int i = 0; i < clients_hi; i++) {
        publisher_t *p = &publishers[i];
        if (!p->used || p->halted || p->done) continue;
        while (producing(p, p->seq) && due_ns(p, p->seq) <= now) {
            late((now - due_ns(p, p->seq)) / 1e6);
            if (p->route && p->route->nc) publish_one(p, p->route, p->seq);
            p->seq++;
            if (!p->route) continue;
            p->held_from = p->seq;
        }
        if (!producing(p, p->seq)) {
            p->done = 1;
            say("done %d %" PRId64, p->idx, p->seq);
            continue;
        }
        int64_t due = due_ns(p, p->seq);
        if (due < next) next = due;
    }
    return next;
}

/* -- commands ------------------------------------------------------------------------------------ */
static int find_sub(int sid) {
    for (int i = 0; i < subs_hi; i++)
        if (subs[i].used && subs[i].sid == sid) return i;
    return -1;
}

static int free_sub(void) {
    for (int i = 0; i < MAX_SUBS; i++)
        if (!subs[i].used) {
            if (i >= subs_hi) subs_hi = i + 1;
            return i;
        }
    return -1;
}

/* stdin: LINE_MAX_ + max_payload bytes and room to read more (allocated at the start) */
static char *stdin_buf;
static size_t stdin_cap, stdin_len, max_payload = 1 << 20;
static int stdin_dropping;        /* inside an over-long line: its bytes are dropped up to its newline */

static void summary(int64_t req, int idx) {
    if (idx >= 0 && idx < MAX_CLIENTS && publishers[idx].used) {
        publisher_t *p = &publishers[idx];
        say("ok %" PRId64 " {\"sent\":%" PRId64 ",\"held\":%" PRId64 "}", req, p->seq, p->route ? 0 : p->seq - p->held_from);
    } else if (idx >= 0 && idx < MAX_CLIENTS && subscribers[idx].used) {
        subscriber_t *s = &subscribers[idx];
        int64_t lost = 0, dup = 0, reord = 0;
        fprintf(stdout, "ok %" PRId64 " {\"received\":%" PRId64 ",\"bytes\":%" PRId64 ",\"malformed\":%" PRId64
                ",\"producers\":{", req, s->received, s->bytes, s->malformed);
        for (size_t i = 0; i < s->nproducers; i++) {
            producer_t *p = &s->producers[i];
            char name[192];
            json_str(name, sizeof name, p->name);
            fprintf(stdout, "%s%s:{\"received\":%" PRId64 ",\"first\":%" PRId64 ",\"last\":%" PRId64
                    ",\"lost\":%" PRId64 ",\"duplicates\":%" PRId64 ",\"reordered\":%" PRId64 "}", i ? "," : "", name,
                    p->received, p->first, p->last, p->lost, p->duplicates, p->reordered);
            lost += p->lost, dup += p->duplicates, reord += p->reordered;
        }
        fprintf(stdout, "},\"brokers\":{");
        for (int b = 0; b < s->nbrokers; b++) {
            char name[192];
            json_str(name, sizeof name, s->brokers[b]);
            fprintf(stdout, "%s%s:%" PRId64, b ? "," : "", name, s->by_broker[b]);
        }
        say("},\"lost\":%" PRId64 ",\"duplicates\":%" PRId64 ",\"reordered\":%" PRId64 "}", lost, dup, reord);
    } else {
        refuse(req, "no client %d", idx);
    }
}

/* -- the command line, parsed by a pure function (nothing but its arguments), so it can be fuzzed ----
 * Each command's words after its name, one letter a word: r a request id (1..INT64_MAX), i an id
 * (0..INT_MAX), I an id or "-" (-1), n a payload's length (0..max_payload), d a finite number, m
 * "drain" or "now", s any word. A line that does not match its command's words is refused whole. */
enum { OP_EXIT, OP_PUB, OP_PUBR, OP_NETNS, OP_CONNECT, OP_SUB, OP_DSUB, OP_UNSUB, OP_FLUSH, OP_CLOSE, OP_SUBSCRIBER,
       OP_PUBLISHER, OP_ROUTE, OP_HALT, OP_SUMMARY, OP_FORGET, NOPS };
static const struct { const char *name, *words; } OPS[NOPS] = {
    [OP_EXIT] = {"exit", ""}, [OP_PUB] = {"pub", "isn"}, [OP_PUBR] = {"pubr", "issn"},
    [OP_NETNS] = {"netns", "ris"}, [OP_CONNECT] = {"connect", "rissiI"},
    [OP_SUB] = {"sub", "riis"}, [OP_DSUB] = {"dsub", "riisi"}, [OP_UNSUB] = {"unsub", "ri"},
    [OP_FLUSH] = {"flush", "ri"}, [OP_CLOSE] = {"close", "rim"}, [OP_SUBSCRIBER] = {"subscriber", "risssss"},
    [OP_PUBLISHER] = {"publisher", "risssdiddI"}, [OP_ROUTE] = {"route", "riI"}, [OP_HALT] = {"halt", "ri"},
    [OP_SUMMARY] = {"summary", "ri"}, [OP_FORGET] = {"forget", "ri"},
};
#define MAX_WORDS 12
#define BLANKS " \t\r\v\f"

typedef struct {
    int op, argc;
    char *argv[MAX_WORDS];        /* argv[0]: the command's name */
    int64_t req;                  /* 0: none (pub, exit), or not readable */
    int64_t n[MAX_WORDS];         /* word k's integer (r, i, I, n) */
    double d[MAX_WORDS];          /* word k's number (d) */
} cmd_t;

/* A whole decimal integer in [lo, hi] (no sign but '-', no blanks, no rest), or -1. */
static int parse_i64(const char *w, int64_t lo, int64_t hi, int64_t *out) {
    if (!(*w == '-' || (*w >= '0' && *w <= '9'))) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(w, &end, 10);
    if (errno || end == w || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_number(const char *w, double *out) {
    if (!(*w == '-' || *w == '.' || (*w >= '0' && *w <= '9'))) return -1;
    char *end;
    errno = 0;
    double v = strtod(w, &end);
    if (errno || end == w || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* `line` (len bytes and a NUL; its words are cut in place) into `c`: 0, 1 for a blank line, or -1
 * with `why` (and c->req when the line named one). Pure: it reads nothing else. */
static int parse_command(char *line, size_t len, size_t max_payload, cmd_t *c, char *why, size_t wlen) {
    memset(c, 0, sizeof *c);
    c->op = -1;
    int nul = memchr(line, 0, len) != NULL;           /* before strtok_r writes its own */
    char *save = NULL;
    for (char *t = strtok_r(line, BLANKS, &save); t; t = strtok_r(NULL, BLANKS, &save)) {
        if (c->argc == MAX_WORDS) { snprintf(why, wlen, "more than %d words", MAX_WORDS); return -1; }
        c->argv[c->argc++] = t;
    }
    if (!c->argc) return 1;
    for (int op = 0; op < NOPS; op++)
        if (!strcmp(c->argv[0], OPS[op].name)) c->op = op;
    if (c->op < 0) { snprintf(why, wlen, "unknown command '%.40s'", c->argv[0]); return -1; }
    const char *words = OPS[c->op].words;
    if (words[0] == 'r' && c->argc > 1 && parse_i64(c->argv[1], 1, INT64_MAX, &c->req)) c->req = 0;
    /* the words end at a NUL (strtok_r stops there): the line is refused, its words only name it */
    if (nul) { snprintf(why, wlen, "a NUL byte in the line"); return -1; }
    if (c->argc != 1 + (int)strlen(words)) {
        snprintf(why, wlen, "%s takes %d words, not %d", OPS[c->op].name, (int)strlen(words), c->argc - 1);
        return -1;
    }
    for (int k = 1; k < c->argc; k++) {
        const char *w = c->argv[k];
        int bad = 0;
        switch (words[k - 1]) {
        case 'r': bad = parse_i64(w, 1, INT64_MAX, &c->n[k]); break;
        case 'i': bad = parse_i64(w, 0, INT_MAX, &c->n[k]); break;
        case 'I': if (strcmp(w, "-")) bad = parse_i64(w, 0, INT_MAX, &c->n[k]); else c->n[k] = -1; break;
        case 'n': bad = parse_i64(w, 0, (int64_t)max_payload, &c->n[k]); break;
        case 'd': bad = parse_number(w, &c->d[k]); break;
        case 'm': bad = strcmp(w, "drain") && strcmp(w, "now"); break;
        default: break;
        }
        if (bad) {
            snprintf(why, wlen, "%s: word %d '%.40s' is not %s", OPS[c->op].name, k, w,
                     words[k - 1] == 'n' ? "a payload length within the limit" : words[k - 1] == 'd' ? "a finite number"
                     : words[k - 1] == 'm' ? "drain or now" : "an id in range");
            return -1;
        }
    }
    return 0;
}

/* The publisher's checks the parser cannot make: a rate and a start that keep the open loop's
 * catching up bounded (every message due is sent in one wake), a size within a message's limit. */
#define MAX_RATE 1e6
#define MAX_BACKLOG 1e6

static int command(cmd_t *cmd, char *data, size_t dlen) {
    char **argv = cmd->argv;
    int64_t *n = cmd->n, req = cmd->req;
    switch (cmd->op) {
    case OP_EXIT:
        return 1;
    case OP_PUB: {
        conn_t *c = conn_get((int)n[1]);
        natsConnection *nc = c ? c->nc : NULL;
        if (nc) natsConnection_Publish(nc, argv[2], data, (int)dlen);
        return 0;
    }
    case OP_PUBR: {
        conn_t *c = conn_get((int)n[1]);
        natsConnection *nc = c ? c->nc : NULL;
        if (nc) natsConnection_PublishRequest(nc, argv[2], argv[3], data, (int)dlen);
        return 0;
    }
    case OP_NETNS: {
        int index = (int)n[2];
        if (index != netns_count || index >= MAX_NETNS) {
            refuse(req, "namespace %d: the next is %d (at most %d)", index, netns_count, MAX_NETNS);
            return 0;
        }
        /* only a process's network namespace: /proc/PID/ns/net (any other file could block the open) */
        const char *digits = argv[3] + strlen("/proc/");
        size_t ndigits = strspn(digits, "0123456789");
        if (strncmp(argv[3], "/proc/", 6) || !ndigits || ndigits > 10 || strcmp(digits + ndigits, "/ns/net")) {
            refuse(req, "namespace %.200s: not /proc/PID/ns/net", argv[3]);
            return 0;
        }
        int fd = open(argv[3], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            refuse(req, "namespace %.200s: %s", argv[3], strerror(errno));
            if (fd >= 0) close(fd);
            return 0;
        }
        netns_fds[netns_count++] = fd;
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_CONNECT: {
        int id = (int)n[2];
        /* engine.py gives an id again only once told it is "gone" (or refused), so ids stay below the
         * number of connections open at once; a slot is the id modulo MAX_CONNS */
        if (conns[id % MAX_CONNS]) { refuse(req, "connection %d: its slot is in use", id); return 0; }
        if (n[6] >= netns_count) { refuse(req, "connection %d: no namespace %" PRId64, id, n[6]); return 0; }
        conn_t *c = calloc(1, sizeof *c);
        connect_job_t *job = calloc(1, sizeof *job);
        if (!c || !job) abort();
        c->id = id, c->fd = -1;
        snprintf(c->broker, sizeof c->broker, "%s", argv[4]);
        snprintf(c->inbox, sizeof c->inbox, "_EF.%d.%d.%" PRIu64, getpid(), id, ++seq_marker);
        conns[id % MAX_CONNS] = c;
        if (id % MAX_CONNS >= conns_hi) conns_hi = id % MAX_CONNS + 1;
        job->conn = c, job->req = req, job->timeout_ms = (int)n[5], job->netns = (int)n[6];
        snprintf(job->url, sizeof job->url, "%s", argv[3]);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, connect_thread, job)) {
            refuse(req, "no thread");
            conns[id % MAX_CONNS] = NULL;
            free(job);
            free(c);
        }
        pthread_attr_destroy(&attr);
        return 0;
    }
    case OP_SUB:
    case OP_DSUB: {
        conn_t *c = conn_get((int)n[3]);
        natsConnection *nc = c ? c->nc : NULL;
        int slot = free_sub(), data_sub = cmd->op == OP_DSUB;
        int who = data_sub ? (int)n[5] : -1;
        if (!nc || slot < 0 || (data_sub && (who >= MAX_CLIENTS || !subscribers[who].used))) {
            refuse(req, "no such connection or subscriber");
            return 0;
        }
        natsStatus s = natsConnection_SubscribeSync(&subs[slot].sub, nc, argv[4]);
        if (s != NATS_OK) { refuse(req, "%s", natsStatus_GetText(s)); return 0; }
        natsSubscription_SetPendingLimits(subs[slot].sub, -1, -1);   /* the engine reads every tick */
        subs[slot].used = 1, subs[slot].sid = (int)n[2], subs[slot].kind = data_sub, subs[slot].conn = c;
        subs[slot].subscriber = who, subs[slot].seen = 0, subs[slot].broker_slot = -1;
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_UNSUB: {
        int i = find_sub((int)n[2]);
        if (i >= 0) { natsSubscription_Unsubscribe(subs[i].sub); natsSubscription_Destroy(subs[i].sub); subs[i].used = 0; }
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_FLUSH: {
        conn_t *c = conn_get((int)n[2]);
        if (!c || !c->nc) refuse(req, "no connection");
        else send_marker(c, req, 0);
        return 0;
    }
    case OP_CLOSE: {
        conn_t *c = conn_get((int)n[2]);
        if (!c) { say("ok %" PRId64, req); return 0; }
        natsConnection *nc = c->nc;
        if (!strcmp(argv[3], "drain") && nc && natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED) {
            send_marker(c, req, 1);
        } else {
            if (!nc) { refuse(req, "still connecting"); return 0; }
            conn_close(c);
            say("ok %" PRId64, req);
        }
        return 0;
    }
    case OP_SUBSCRIBER: {
        int idx = (int)n[2];
        if (idx >= MAX_CLIENTS || subscribers[idx].used || publishers[idx].used) {
            refuse(req, "client %d exists or is out of range", idx);
            return 0;
        }
        subscriber_t *s = &subscribers[idx];
        memset(s, 0, sizeof *s);
        s->used = 1, s->idx = idx;
        if (idx >= clients_hi) clients_hi = idx + 1;
        if (strcmp(argv[3], "-")) {
            if (out_open(&s->trace, argv[3])) {
                refuse(req, "%s: %s", argv[3], strerror(errno));
                s->used = 0;
                return 0;
            }
        }
        char run[192], topic[192];
        json_str(run, sizeof run, word(argv[4]));
        json_str(topic, sizeof topic, argv[5]);
        json_str(s->consumer_json, sizeof s->consumer_json, argv[6]);
        json_str(s->consumer_site_json, sizeof s->consumer_site_json, word(argv[7]));
        snprintf(s->prefix, sizeof s->prefix, "{\"run_id\":%s,\"topic\":%s,\"producer\":", run, topic);
        s->prefix_len = strlen(s->prefix), s->consumer_json_len = strlen(s->consumer_json);
        s->consumer_site_json_len = strlen(s->consumer_site_json);
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_PUBLISHER: {
        int idx = (int)n[2];
        double rate = cmd->d[6], start = cmd->d[8], duration = cmd->d[9];
        if (idx >= MAX_CLIENTS || publishers[idx].used || subscribers[idx].used) {
            refuse(req, "client %d exists or is out of range", idx);
            return 0;
        }
        if (!(rate > 0 && rate <= MAX_RATE) || n[7] > (int64_t)max_payload || duration < 0
            || (now_ns() / 1e9 - start) * rate > MAX_BACKLOG) {
            refuse(req, "bad publisher: rate in (0, %g], size at most %zu, duration >= 0, at most %g messages "
                   "due at its start", MAX_RATE, max_payload, MAX_BACKLOG);
            return 0;
        }
        publisher_t *p = &publishers[idx];
        memset(p, 0, sizeof *p);
        snprintf(p->subject, sizeof p->subject, "%s", argv[3]);
        snprintf(p->name, sizeof p->name, "%s", argv[4]);
        snprintf(p->site, sizeof p->site, "%s", word(argv[5]));
        p->rate = rate, p->size = (int)n[7], p->start = start, p->duration = duration;
        p->buf = malloc(p->size + ROW_MAX);
        if (!p->buf) abort();
        memset(p->buf, 'x', p->size + ROW_MAX);
        p->used = 1, p->idx = idx;
        if (idx >= clients_hi) clients_hi = idx + 1;
        conn_t *c = n[10] >= 0 ? conn_get((int)n[10]) : NULL;
        p->route = c && c->nc ? c : NULL;
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_ROUTE: {
        int idx = (int)n[2];
        publisher_t *p = idx < MAX_CLIENTS && publishers[idx].used ? &publishers[idx] : NULL;
        conn_t *c = n[3] >= 0 ? conn_get((int)n[3]) : NULL;
        if (!p || (n[3] >= 0 && (!c || !c->nc))) { refuse(req, "no such publisher or connection"); return 0; }
        if (!c) {
            if (p->route) p->held_from = p->seq;
            p->route = NULL;
            say("ok %" PRId64, req);
            return 0;
        }
        if (!p->route)
            for (int64_t q = p->held_from; q < p->seq; q++) publish_one(p, c, q);   /* what was held */
        p->route = c;
        p->held_from = p->seq;
        send_marker(c, req, 0);
        return 0;
    }
    case OP_HALT: {
        int idx = (int)n[2];
        if (idx < MAX_CLIENTS && publishers[idx].used) publishers[idx].halted = 1;
        say("ok %" PRId64, req);
        return 0;
    }
    case OP_SUMMARY:
        summary(req, n[2] < MAX_CLIENTS ? (int)n[2] : -1);
        return 0;
    case OP_FORGET: {   /* a subscriber that is done: its trace closed, its slot free */
        int idx = (int)n[2];
        if (idx < MAX_CLIENTS && subscribers[idx].used) {
            subscriber_t *s = &subscribers[idx];
            int answered_later = s->trace.buf != NULL;
            /* its data subscriptions end with it: the slot may be another subscriber's next (engine.py
             * gives it again), which must not receive through a connection this one still had */
            for (int i = 0; i < subs_hi; i++)
                if (subs[i].used && subs[i].kind == 1 && subs[i].subscriber == idx) {
                    natsSubscription_Unsubscribe(subs[i].sub);
                    natsSubscription_Destroy(subs[i].sub);
                    subs[i].used = 0;
                }
            out_close(&s->trace, req);       /* answered by the writer once the trace is complete */
            for (size_t i = 0; i < s->nproducers; i++) free(s->producers[i].gaps);
            free(s->producers);
            memset(s, 0, sizeof *s);
            if (answered_later) return 0;
        }
        say("ok %" PRId64, req);
        return 0;
    }
    }
    return 0;
}

/* An over-long line is dropped whole, up to its newline, and refused once, naming its request when its
 * first words do. */
static void refuse_long(const char *head, size_t have) {
    char start[64];
    size_t k = have < sizeof start - 1 ? have : sizeof start - 1;
    memcpy(start, head, k);
    start[k] = 0;
    char *save = NULL, *op = strtok_r(start, BLANKS, &save), *second = op ? strtok_r(NULL, BLANKS, &save) : NULL;
    int64_t req = 0;
    if (!op || !second || !strcmp(op, "pub") || !strcmp(op, "pubr") || parse_i64(second, 1, INT64_MAX, &req)) req = 0;
    refuse(req, "a line over %d bytes: dropped", LINE_MAX_ - 1);
}

/* Lines from stdin; a "pub" line is followed by its LEN bytes of data (at most max_payload: the buffer
 * holds a whole line and its data). Returns 1 on exit/EOF. A refused "pub" line's data is not
 * skipped (its length is what was refused): it is read as lines, each refused unless it is one. */
static int read_commands(void) {
    ssize_t got = read(0, stdin_buf + stdin_len, stdin_cap - stdin_len);
    if (got == 0) return 1;
    if (got < 0) return errno == EAGAIN || errno == EINTR ? 0 : 1;
    stdin_len += got;
    size_t off = 0;
    for (;;) {
        char *at = stdin_buf + off;
        size_t have = stdin_len - off;
        char *nl = memchr(at, '\n', have);
        if (stdin_dropping) {                         /* the rest of an over-long line */
            if (!nl) { off = stdin_len; break; }
            stdin_dropping = 0;
            off = nl + 1 - stdin_buf;
            continue;
        }
        if (!nl) {
            if (have >= LINE_MAX_) { refuse_long(at, have); stdin_dropping = 1; off = stdin_len; }
            break;
        }
        size_t llen = nl - at;
        if (llen >= LINE_MAX_) { refuse_long(at, llen); off = nl + 1 - stdin_buf; continue; }
        char line[LINE_MAX_], why[256];
        memcpy(line, at, llen);
        line[llen] = 0;
        cmd_t cmd;
        int parsed = parse_command(line, llen, max_payload, &cmd, why, sizeof why);
        size_t dlen = parsed == 0 && cmd.op == OP_PUB ? (size_t)cmd.n[3]
                      : parsed == 0 && cmd.op == OP_PUBR ? (size_t)cmd.n[4] : 0;
        if (have - llen - 1 < dlen) break;            /* the data is not all here yet (it fits) */
        off = (nl + 1 - stdin_buf) + dlen;
        if (parsed < 0) refuse(cmd.req, "%s", why);
        else if (parsed == 0 && command(&cmd, nl + 1, dlen)) return 1;
    }
    memmove(stdin_buf, stdin_buf + off, stdin_len - off);
    stdin_len -= off;
    return 0;
}

static void handle_events(void) {
    uint64_t count;
    if (read(evfd, &count, sizeof count) < 0 && errno != EAGAIN) perror("engine: eventfd");
    pthread_mutex_lock(&events_lock);
    event_t *e = events_head;
    events_head = events_tail = NULL;
    pthread_mutex_unlock(&events_lock);
    while (e) {
        conn_t *c = conn_get(e->conn);
        if (e->kind == 1 && c) {
            natsStatus s = natsConnection_SubscribeSync(&c->marker, c->nc, c->inbox);
            c->open = s == NATS_OK;
            if (c->open) say("ok %" PRId64, e->req);
            else refuse(e->req, "marker subscription: %s", natsStatus_GetText(s));
        } else if (e->kind == 2) {
            refuse(e->req, "%s", e->text);
            if (c) { conns[c->id % MAX_CONNS] = NULL; free(c); }
        } else if (e->kind == 3 && c && !c->closing) say("lost %d", c->id);
        else if (e->kind == 4 && c && !c->closing) say("back %d", c->id);
        else if (e->kind == 5) say("closed %d", e->conn);
        else if (e->kind == 7) say("ok %" PRId64, e->req);   /* a forgotten subscriber's trace is complete */
        else if (e->kind == 6 && e->conn >= 0 && conns[e->conn % MAX_CONNS] && conns[e->conn % MAX_CONNS]->id == e->conn)
            conn_closed(conns[e->conn % MAX_CONNS]);      /* closing: conn_get no longer returns it */
        event_t *next = e->next;
        free(e);
        e = next;
    }
}

/* The kernel's receive timestamp of the newest segment queued on `fd` (within what one read takes),
 * or now. Peeked with MSG_TRUNC: TCP walks the queue without copying the data (libnats reads it). */
static int64_t receive_stamp(int fd) {
    static char sink[1 << 16];
    char control[256];
    struct iovec iov = {.iov_base = sink, .iov_len = sizeof sink};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    if (recvmsg(fd, &msg, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT) > 0)
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
            }
    return now_ns();
}

static void read_conn(conn_t *c) {
    natsConnection *nc = c->nc;   /* one load each: libnats's threads may change them meanwhile */
    int fd = c->fd;
    if (!nc || fd < 0) return;
    c->ts_ns = receive_stamp(fd);
    natsConnection_ProcessReadEvent(nc);
    natsMsg *m;
    if (c->marker)
        while (natsSubscription_NextMsg(&m, c->marker, 0) == NATS_OK) {
            int64_t req = strtoll(natsMsg_GetData(m), NULL, 10);
            destroy_later(m);
            for (pending_t **pp = &pendings; *pp; pp = &(*pp)->next)
                if ((*pp)->req == req && (*pp)->conn == c->id) {
                    pending_t *p = *pp;
                    *pp = p->next;
                    say("ok %" PRId64, req);
                    if (p->close_after) { free(p); conn_close(c); return; }
                    free(p);
                    break;
                }
        }
    for (int i = 0; i < subs_hi; i++) {
        sub_t *sb = &subs[i];
        if (!sb->used || sb->conn != c) continue;
        while (sb->used && natsSubscription_NextMsg(&m, sb->sub, 0) == NATS_OK) {
            if (sb->kind && subscribers[sb->subscriber].used) deliver(sb, m, c->ts_ns);
            else if (sb->kind) {}                    /* its subscriber was forgotten: nothing to record */
            else {
                fprintf(stdout, "msg %d %d\n", sb->sid, natsMsg_GetDataLength(m));
                fwrite(natsMsg_GetData(m), 1, natsMsg_GetDataLength(m), stdout);
                fputc('\n', stdout);
            }
            destroy_later(m);
        }
    }
}

int main(int argc, char **argv) {
    const char *health_path = NULL;
    int64_t tick_us = tick_ns / 1000, holdoff_us = read_holdoff_ns / 1000, nice_arg = 0, rt_arg = 0,
            payload_arg = (int64_t)max_payload;
    for (int i = 1; i < argc; i++) {
        int bad = i + 1 >= argc;
        if (bad) {}
        else if (!strcmp(argv[i], "--tick-us")) bad = parse_i64(argv[++i], 1, 100000, &tick_us);
        else if (!strcmp(argv[i], "--read-holdoff-us")) bad = parse_i64(argv[++i], 0, 100000, &holdoff_us);
        else if (!strcmp(argv[i], "--health")) health_path = argv[++i];
        else if (!strcmp(argv[i], "--nice")) bad = parse_i64(argv[++i], -20, 19, &nice_arg);
        else if (!strcmp(argv[i], "--rt-prio")) bad = parse_i64(argv[++i], 0, 99, &rt_arg);
        else if (!strcmp(argv[i], "--max-payload")) bad = parse_i64(argv[++i], 1, 64 << 20, &payload_arg);
        else bad = 1;
        if (bad) {
            fprintf(stderr, "usage: engine [--tick-us 1..100000] [--read-holdoff-us 0..100000] [--health FILE] "
                    "[--nice -20..19] [--rt-prio 0..99] [--max-payload 1..67108864]\n");
            return 2;
        }
    }
    tick_ns = tick_us * 1000, read_holdoff_ns = holdoff_us * 1000;
    nice_value = (int)nice_arg, rt_prio = (int)rt_arg, max_payload = (size_t)payload_arg;
    stdin_cap = LINE_MAX_ + max_payload + (1 << 16);
    if (!(stdin_buf = malloc(stdin_cap))) { fprintf(stderr, "engine: no memory for the command buffer\n"); return 1; }
    if (health_path && out_open(&health, health_path)) { perror(health_path); return 2; }
    /* Before any thread starts: libnats's threads and ours inherit it. The engine's wakes are short
     * bursts whose lateness is every due message's: at a real-time priority (below the delay line's, so
     * the network still comes first) a wake preempts the emulated hosts' threads at once, where a nice
     * value did not (a woken task may wait for the running one's slice: with ~150 processes on two
     * cores, engines were 5-45 ms late in the seconds the control planes were busy). Every thread of
     * the engine must have it (no SCHED_RESET_ON_FORK): the loop takes a connection's lock that
     * libnats's timer, connect and close threads also take, and one of them preempted while holding
     * it blocked the loop for 2-55 ms (priority inversion, measured in `docs/results`). It never
     * busy-polls, so its share of the CPU stays what its work needs. Without the right to it, nice. */
    int realtime = 0;
    if (rt_prio > 0) {
        struct sched_param sp = {.sched_priority = rt_prio};
        realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
        if (!realtime)
            fprintf(stderr, "engine: warning: SCHED_FIFO %d unavailable (%s), using nice %d\n", rt_prio,
                    strerror(errno), nice_value);
    }
    if (!realtime && nice_value && setpriority(PRIO_PROCESS, 0, nice_value))
        fprintf(stderr, "engine: warning: nice %d unavailable (%s), running at the default priority\n",
                nice_value, strerror(errno));
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    /* Messages are freed in batches (destroy_doomed): with glibc's defaults each batch gave its memory
     * back to the kernel (brk) and the next one faulted it in again, a tenth of the engine's CPU */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);   /* the terminal's Ctrl-C is Python's: it ends the engine with "exit" */
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, NULL);   /* libnats's threads inherit it: SIGTERM reaches the loop */
    int sfd = signalfd(-1, &term, SFD_NONBLOCK | SFD_CLOEXEC);
    main_thread = pthread_self();
    /* an engine serving every client node of a machine holds a connection per client (a few thousand at
     * MMOG's paper size) and a trace file per subscriber: the soft limit of 1,024 descriptors is raised
     * to the hard one */
    struct rlimit files;
    if (!getrlimit(RLIMIT_NOFILE, &files) && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    if (nats_Open(-1) != NATS_OK) { fprintf(stderr, "engine: nats_Open failed\n"); return 1; }
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    sock_ep = epoll_create1(EPOLL_CLOEXEC);
    evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &stdin_buf};
    epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &ev);
    ev.data.ptr = &evfd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, evfd, &ev);
    ev.data.ptr = &sfd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);
    struct epoll_event sockets = {.events = EPOLLIN, .data.ptr = &sock_ep};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sock_ep, &sockets);
    int reads_armed = 1;               /* does data on a socket wake the loop? (not during a hold-off) */
    int64_t reads_resume = 0;
    health_second = now_ns() / 1000000000LL;
    int64_t last_wake = 0, last_second = 0, last_destroy = 0;
    int quit = 0;
    say("ready");
    fflush(stdout);
    while (!quit) {
        int64_t now = now_ns();
        int64_t next = publish_due(now);
        /* the next wake: the next due message's time, but not within a tick of the last wake (so one
         * wake serves every message due in that tick, and there is at most one publishing wake a
         * tick); the end of a read hold-off; or a second (health and traces). A message due more
         * than a tick after the last wake leaves at its time: a grid would have added up to a tick
         * to every low-rate publisher's messages for no saving */
        int64_t wake = next == INT64_MAX ? now + 1000000000LL : next;
        if (next != INT64_MAX && wake < last_wake + tick_ns) wake = last_wake + tick_ns;
        if (!reads_armed && reads_resume < wake) wake = reads_resume;
        if (wake > now + 1000000000LL) wake = now + 1000000000LL;
        if (atomic_load(&writes_wanted)) write_buffered();
        fflush(stdout);
        while (ngraves) free(graveyard[--ngraves]);
        /* the wait ends at the wake: epoll_pwait2's timeout has ns resolution (a timerfd cost two
         * more syscalls a wake, arming it and reading it) */
        struct epoll_event events[64];
        int64_t left = wake - now_ns();
        struct timespec timeout = {.tv_sec = left > 0 ? left / 1000000000LL : 0,
                                   .tv_nsec = left > 0 ? left % 1000000000LL : 0};
        int n = epoll_pwait2(epfd, events, 64, &timeout, NULL);
        last_wake = now_ns();
        if (last_wake >= wake && (last_wake - wake) / 1e6 > lag_max_ms) lag_max_ms = (last_wake - wake) / 1e6;
        int sockets_ready = !reads_armed;  /* armed, the wait itself said whether a socket has data */
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            if (p == &stdin_buf) quit |= read_commands();
            else if (p == &evfd) handle_events();
            else if (p == &sfd) quit = 1;   /* SIGTERM: flush what was recorded, then exit */
            else if (p == &sock_ep) sockets_ready = 1;
        }
        /* Every wake reads what is there (a publishing wake too, for free). Once something was read,
         * data alone does not wake the loop again for --read-holdoff-us: receive times are the
         * kernel's, so a later read costs no latency, and the wakeups are bounded. */
        int m = sockets_ready ? epoll_wait(sock_ep, events, 64, 0) : 0;
        for (int i = 0; i < m; i++) read_conn((conn_t *)events[i].data.ptr);
        if (m > 0) {
            if (reads_armed && read_holdoff_ns > 0) {
                sockets.events = 0;  /* disarmed, not removed: re-adding an epoll to an epoll checks
                                      * for loops through all its sockets (~14 % of the engine's CPU
                                      * with MMOG's 1,200 connections); a MOD checks nothing */
                epoll_ctl(epfd, EPOLL_CTL_MOD, sock_ep, &sockets);
                reads_armed = 0;
            }
            reads_resume = last_wake + read_holdoff_ns;
        } else if (!reads_armed && last_wake >= reads_resume) {
            sockets.events = EPOLLIN;
            epoll_ctl(epfd, EPOLL_CTL_MOD, sock_ep, &sockets);
            reads_armed = 1;
        }
        publish_due(now_ns());
        if (atomic_load(&writes_wanted)) write_buffered();
        int64_t busy = now_ns() - last_wake;               /* a stall in the loop's own work is lag too */
        if (busy > tick_ns && (busy - tick_ns) / 1e6 > lag_max_ms) lag_max_ms = (busy - tick_ns) / 1e6;
        health_roll(last_wake);
        if (last_wake - last_destroy >= DESTROY_EVERY_NS) {
            last_destroy = last_wake;
            destroy_doomed();
        }
        if (last_wake - last_second >= 1000000000LL) {      /* once a second: traces to disk, counts */
            last_second = last_wake;
            for (int i = 0; i < clients_hi; i++)
                if (subscribers[i].used) {
                    out_flush(&subscribers[i].trace);
                    say("counts %d %" PRId64 " %" PRId64, i, subscribers[i].received, subscribers[i].bytes);
                }
        }
    }
    for (int i = 0; i < clients_hi; i++)
        if (subscribers[i].used) out_close(&subscribers[i].trace, 0);
    health_roll(now_ns() + 1000000000LL);
    out_close(&health, 0);
    writer_stop();
    fflush(stdout);
    return 0;   /* the sockets close with the process: libnats's Close would wait for a ping round trip each */
}
