/*
 * natsload: open-loop NATS load generator for `make bench-overload` (testbed/bench/overload.py).
 *
 * Python clients (nats-py) top out far below the rates where a nats-server saturates, so this
 * speaks the NATS text protocol directly: CONNECT, pipelined "PUB <subj> <n>\r\n<payload>\r\n",
 * SUB, and a parser for "MSG <subj> <sid> [reply] <n>\r\n<payload>\r\n" frames.
 *
 *   natsload pub --server IP:PORT --prefix P --topics A-B --rate R --size N --run S
 *       one connection per topic P.A .. P.B; topic t sends message i at
 *       T0 + (i + t/ntopics) / R (open loop: the due time is stamped into the payload, so a
 *       message the generator could not write on time counts its lateness as latency);
 *       sends every message due before T0 + S, flushes, prints one JSON line, exits.
 *   natsload sub --server IP:PORT --prefix P --pairs A-B --consumers C --window W,D --grace G
 *       one connection per (topic, consumer) pair A..B (pair k = topic k / C), each subscribed to
 *       its topic; counts messages received in [T0 + W, T0 + W + D] and their one-way latency
 *       (receive time - due time, CLOCK_REALTIME, shared by every namespace), keeps receiving
 *       until T0 + W + D + G, prints one JSON line, exits.
 *
 * Both print "ready" once connected (subscriptions confirmed by PING/PONG), then read T0
 * (CLOCK_REALTIME nanoseconds) from stdin, so every process of a point starts from one instant.
 * Payload: 8 bytes due time (ns, little endian), 8 bytes sequence number, then filler.
 * Latency histogram: 1 % wide logarithmic buckets over microseconds. Publishers pace in 50 us
 * ticks (a batch per connection per tick), which adds at most 50 us to a message's latency.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP   (4 << 20)
#define OUT_CAP  (1 << 20)
#define NBUCKETS 2400
#define GROWTH   1.01
#define TICK_NS  50000           /* publisher pacing quantum: adds <= 50 us of latency */

typedef struct {
    int fd, topic, closed;
    char *in;
    size_t in_len;
    char *out;
    size_t out_len, out_off;
    char *frame;                 /* pub: the whole PUB frame, stamped per message */
    size_t frame_len, stamp_at;
    uint64_t sent, total;        /* pub: messages buffered, messages to send */
    int64_t phase_ns;
} conn_t;

static const char *server_ip = "127.0.0.1";
static int server_port = 4222;
static char prefix[64] = "ov";
static uint64_t hist[NBUCKETS];
static uint64_t errors_seen;
static char last_error[200];

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "natsload: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void range(const char *text, int *a, int *b) {
    if (sscanf(text, "%d-%d", a, b) != 2 || *a < 0 || *b < *a) {
        fprintf(stderr, "natsload: bad range '%s' (want A-B)\n", text);
        exit(2);
    }
}

static void write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write");
        data += n;
        len -= (size_t)n;
    }
}

/* One complete protocol line from a blocking socket (the handshake only). */
static void read_line(conn_t *c, char *line, size_t cap) {
    for (;;) {
        char *eol = memmem(c->in, c->in_len, "\r\n", 2);
        if (eol) {
            size_t n = (size_t)(eol - c->in);
            snprintf(line, cap, "%.*s", (int)n, c->in);
            memmove(c->in, eol + 2, c->in_len - n - 2);
            c->in_len -= n + 2;
            return;
        }
        ssize_t r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
        if (r <= 0) die("handshake read");
        c->in_len += (size_t)r;
    }
}

/* Connect, CONNECT, run `extra` (SUBs), PING, wait for PONG; the socket is then non-blocking. */
static void handshake(conn_t *c, const char *extra) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port)};
    if (inet_pton(AF_INET, server_ip, &sa.sin_addr) != 1) {
        fprintf(stderr, "natsload: bad server address %s\n", server_ip);
        exit(2);
    }
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa)) die("connect");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->in = malloc(IN_CAP);
    if (!c->in) die("malloc");
    char line[8192];
    read_line(c, line, sizeof line);
    if (strncmp(line, "INFO", 4)) {
        fprintf(stderr, "natsload: expected INFO, got '%s'\n", line);
        exit(1);
    }
    const char *hello = "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"natsload\",\"lang\":\"c\"}\r\n";
    write_all(c->fd, hello, strlen(hello));
    if (extra) write_all(c->fd, extra, strlen(extra));
    write_all(c->fd, "PING\r\n", 6);
    for (;;) {
        read_line(c, line, sizeof line);
        if (!strcmp(line, "PONG")) break;
        if (!strncmp(line, "-ERR", 4)) {
            fprintf(stderr, "natsload: server refused: %s\n", line);
            exit(1);
        }
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
}

static int64_t read_t0(void) {
    printf("ready\n");
    fflush(stdout);
    long long t0;
    if (scanf("%lld", &t0) != 1) {
        fprintf(stderr, "natsload: no start time on stdin\n");
        exit(1);
    }
    return (int64_t)t0;
}

static void note_error(const char *line, size_t n) {
    errors_seen++;
    snprintf(last_error, sizeof last_error, "%.*s", (int)(n < 150 ? n : 150), line);
    for (char *p = last_error; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 32) *p = '\'';
}

static void queue_out(conn_t *c, const char *data, size_t n) {
    if (!c->out) {
        c->out = malloc(OUT_CAP);
        if (!c->out) die("malloc");
    }
    if (c->out_len + n <= OUT_CAP) {
        memcpy(c->out + c->out_len, data, n);
        c->out_len += n;
    }
}

static void flush_out(conn_t *c, uint64_t *eagain) {
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            (*eagain)++;
            break;
        }
        c->closed = 1;
        return;
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
    } else if (c->out_off > OUT_CAP / 2) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
}

/* Control lines a publisher may get: PING (answered), -ERR (recorded). */
static void pub_input(conn_t *c) {
    for (;;) {
        ssize_t r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
        if (r > 0) {
            c->in_len += (size_t)r;
            continue;
        }
        if (r == 0) c->closed = 1;
        break;
    }
    char *p = c->in, *end = c->in + c->in_len, *eol;
    while ((eol = memmem(p, (size_t)(end - p), "\r\n", 2))) {
        if (!strncmp(p, "PING", 4)) queue_out(c, "PONG\r\n", 6);
        else if (!strncmp(p, "-ERR", 4)) note_error(p, (size_t)(eol - p));
        p = eol + 2;
    }
    c->in_len = (size_t)(end - p);
    memmove(c->in, p, c->in_len);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int run_pub(int first, int last, double rate, int size, double seconds, int ntopics_total) {
    int n = last - first + 1;
    conn_t *conns = calloc((size_t)n, sizeof *conns);
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    if (!conns || !pfd) die("calloc");
    double period = 1e9 / rate;
    for (int i = 0; i < n; i++) {
        conn_t *c = &conns[i];
        c->topic = first + i;
        handshake(c, NULL);
        char head[128];
        int h = snprintf(head, sizeof head, "PUB %s.%d %d\r\n", prefix, c->topic, size);
        c->frame_len = (size_t)h + (size_t)size + 2;
        c->frame = malloc(c->frame_len);
        if (!c->frame) die("malloc");
        memcpy(c->frame, head, (size_t)h);
        memset(c->frame + h, 'x', (size_t)size);
        memcpy(c->frame + h + size, "\r\n", 2);
        c->stamp_at = (size_t)h;
        c->phase_ns = (int64_t)(period * c->topic / (ntopics_total > 0 ? ntopics_total : 1));
        double span = seconds * 1e9 - (double)c->phase_ns;
        c->total = span > 0 ? (uint64_t)ceil(span / period) : 0;
        queue_out(c, "", 0);
    }
    int64_t t0 = read_t0();
    double cpu0 = cpu_seconds();
    uint64_t eagain = 0, sent = 0;
    int64_t max_lag = 0;
    for (;;) {
        int64_t now = now_ns(), wake = INT64_MAX;
        int busy = 0;
        for (int i = 0; i < n; i++) {
            conn_t *c = &conns[i];
            if (c->closed) continue;
            while (c->sent < c->total) {
                int64_t due = t0 + c->phase_ns + (int64_t)(period * (double)c->sent);
                if (due > now) {
                    if (due < wake) wake = due;
                    break;
                }
                if (c->out_len + c->frame_len > OUT_CAP) { /* the socket is behind: stay late */
                    if (now - due > max_lag) max_lag = now - due;
                    break;
                }
                uint64_t stamp[2] = {(uint64_t)due, c->sent};
                memcpy(c->frame + c->stamp_at, stamp, size >= 16 ? 16 : (size_t)size);
                memcpy(c->out + c->out_len, c->frame, c->frame_len);
                c->out_len += c->frame_len;
                c->sent++;
            }
            flush_out(c, &eagain);
            pfd[i].fd = c->fd;
            pfd[i].events = POLLIN | (c->out_off < c->out_len ? POLLOUT : 0);
            if (c->sent < c->total || c->out_off < c->out_len) busy = 1;
        }
        if (!busy) break;
        /* At most one pass per TICK_NS: at high rates a pass writes a batch per connection instead
         * of one syscall per message; each message still carries its own due time. */
        if (wake != INT64_MAX && wake < now + TICK_NS) wake = now + TICK_NS;
        int64_t wait = wake == INT64_MAX ? 100000000 : wake - now_ns();
        if (wait < 0) wait = 0;
        struct timespec ts = {.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
        if (ppoll(pfd, (nfds_t)n, &ts, NULL) > 0)
            for (int i = 0; i < n; i++)
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) pub_input(&conns[i]);
    }
    int closed = 0;
    for (int i = 0; i < n; i++) {
        sent += conns[i].sent;
        closed += conns[i].closed;
    }
    printf("{\"role\":\"pub\",\"topics\":%d,\"sent\":%llu,\"max_lag_s\":%.6f,\"eagain\":%llu,\"closed\":%d,"
           "\"errors\":%llu,\"last_error\":\"%s\",\"cpu_s\":%.3f,\"elapsed_s\":%.3f}\n",
           n, (unsigned long long)sent, max_lag / 1e9, (unsigned long long)eagain, closed,
           (unsigned long long)errors_seen, last_error, cpu_seconds() - cpu0, (now_ns() - t0) / 1e9);
    return 0;
}

/* Parses what arrived on a subscriber connection; returns bytes consumed. */
static size_t parse_msgs(conn_t *c, int64_t now, int64_t w0, int64_t w1, uint64_t *in_window,
                         uint64_t *total, uint64_t *bad) {
    char *p = c->in, *end = c->in + c->in_len;
    for (;;) {
        char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol) break;
        if (p[0] == 'M' && p[1] == 'S' && p[2] == 'G') {
            char *q = eol;                       /* the byte count is the last token */
            while (q > p && q[-1] != ' ') q--;
            size_t nbytes = strtoul(q, NULL, 10);
            if ((size_t)(end - eol) < 2 + nbytes + 2) break;  /* payload not complete yet */
            char *payload = eol + 2;
            (*total)++;
            if (nbytes >= 8 && now >= w0 && now <= w1) {
                int64_t due;
                memcpy(&due, payload, 8);
                double us = (now - due) / 1e3;
                int b = us >= 1.0 ? (int)(log(us) / log(GROWTH)) : 0;
                if (b >= NBUCKETS) b = NBUCKETS - 1;
                if (b < 0) b = 0;
                hist[b]++;
                (*in_window)++;
            } else if (nbytes < 8) {
                (*bad)++;
            }
            p = payload + nbytes + 2;
            continue;
        }
        if (!strncmp(p, "PING", 4)) queue_out(c, "PONG\r\n", 6);
        else if (!strncmp(p, "-ERR", 4)) note_error(p, (size_t)(eol - p));
        p = eol + 2;
    }
    return (size_t)(p - c->in);
}

static double quantile_ms(double q, uint64_t count) {
    if (!count) return -1;
    uint64_t rank = (uint64_t)ceil(q * (double)count), seen = 0;
    if (rank < 1) rank = 1;
    for (int b = 0; b < NBUCKETS; b++) {
        seen += hist[b];
        if (seen >= rank) return pow(GROWTH, b + 0.5) / 1e3;  /* bucket middle, geometric */
    }
    return pow(GROWTH, NBUCKETS) / 1e3;
}

static int run_sub(int first, int last, int consumers, double warmup, double duration, double grace) {
    int n = last - first + 1;
    conn_t *conns = calloc((size_t)n, sizeof *conns);
    if (!conns) die("calloc");
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll");
    for (int i = 0; i < n; i++) {
        conn_t *c = &conns[i];
        c->topic = (first + i) / consumers;
        char sub[128];
        snprintf(sub, sizeof sub, "SUB %s.%d %d\r\n", prefix, c->topic, 1);
        handshake(c, sub);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev)) die("epoll_ctl");
    }
    int64_t t0 = read_t0();
    int64_t w0 = t0 + (int64_t)(warmup * 1e9), w1 = w0 + (int64_t)(duration * 1e9);
    int64_t stop = w1 + (int64_t)(grace * 1e9);
    double cpu0 = cpu_seconds();
    uint64_t in_window = 0, total = 0, bad = 0, eagain = 0;
    int closed = 0;
    struct epoll_event evs[64];
    for (;;) {
        int64_t now = now_ns();
        if (now >= stop) break;
        int k = epoll_wait(ep, evs, 64, (int)((stop - now) / 1000000 + 1));
        for (int e = 0; e < k; e++) {
            conn_t *c = &conns[evs[e].data.u32];
            for (int rounds = 0; rounds < 8; rounds++) {  /* bounded: other connections get a turn */
                ssize_t r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
                if (r <= 0) {
                    if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                        c->closed = 1;  /* e.g. the server cut a slow consumer */
                        closed++;
                        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    }
                    break;
                }
                c->in_len += (size_t)r;
                now = now_ns();
                size_t used = parse_msgs(c, now, w0, w1, &in_window, &total, &bad);
                memmove(c->in, c->in + used, c->in_len - used);
                c->in_len -= used;
                if (c->out_len) flush_out(c, &eagain);
                if ((size_t)r < IN_CAP / 4) break;
            }
        }
    }
    printf("{\"role\":\"sub\",\"connections\":%d,\"received_window\":%llu,\"received_total\":%llu,"
           "\"window_s\":%.3f,\"p50_ms\":%.4f,\"p95_ms\":%.4f,\"p99_ms\":%.4f,\"max_ms\":%.4f,\"closed\":%d,"
           "\"bad\":%llu,\"errors\":%llu,\"last_error\":\"%s\",\"cpu_s\":%.3f,\"hist_growth\":%.2f,\"hist\":{",
           n, (unsigned long long)in_window, (unsigned long long)total, duration,
           quantile_ms(0.50, in_window), quantile_ms(0.95, in_window), quantile_ms(0.99, in_window),
           quantile_ms(1.0, in_window), closed, (unsigned long long)bad, (unsigned long long)errors_seen,
           last_error, cpu_seconds() - cpu0, GROWTH);
    int comma = 0;  /* sparse histogram, so the harness can merge processes exactly */
    for (int b = 0; b < NBUCKETS; b++)
        if (hist[b]) {
            printf("%s\"%d\":%llu", comma ? "," : "", b, (unsigned long long)hist[b]);
            comma = 1;
        }
    printf("}}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "pub") && strcmp(argv[1], "sub"))) {
        fprintf(stderr, "usage: natsload pub|sub --server IP:PORT --prefix P ... (see the source)\n");
        return 2;
    }
    int first = 0, last = 0, consumers = 1, size = 1000, ntopics = 1;
    double rate = 100, seconds = 1, warmup = 1, duration = 1, grace = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--server")) {
            static char host[64];
            if (sscanf(v, "%63[^:]:%d", host, &server_port) != 2) {
                fprintf(stderr, "natsload: bad --server %s\n", v);
                return 2;
            }
            server_ip = host;
        } else if (!strcmp(k, "--prefix")) snprintf(prefix, sizeof prefix, "%s", v);
        else if (!strcmp(k, "--topics") || !strcmp(k, "--pairs")) range(v, &first, &last);
        else if (!strcmp(k, "--ntopics")) ntopics = atoi(v);
        else if (!strcmp(k, "--consumers")) consumers = atoi(v);
        else if (!strcmp(k, "--rate")) rate = atof(v);
        else if (!strcmp(k, "--size")) size = atoi(v);
        else if (!strcmp(k, "--run")) seconds = atof(v);
        else if (!strcmp(k, "--window")) sscanf(v, "%lf,%lf", &warmup, &duration);
        else if (!strcmp(k, "--grace")) grace = atof(v);
        else {
            fprintf(stderr, "natsload: unknown option %s\n", k);
            return 2;
        }
    }
    if (rate <= 0 || size < 16 || consumers < 1 || seconds <= 0) {
        fprintf(stderr, "natsload: need --rate > 0, --size >= 16, --consumers >= 1\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    return !strcmp(argv[1], "pub") ? run_pub(first, last, rate, size, seconds, ntopics)
                                   : run_sub(first, last, consumers, warmup, duration, grace);
}
