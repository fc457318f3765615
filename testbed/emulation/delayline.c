/*
 * delayline: user-space replacement for netem on kernels without sch_netem.
 *
 * Relays Ethernet frames between two interfaces (A <-> B) through AF_PACKET
 * sockets, holding each frame until  rx_time + serialization + delay (+jitter).
 * rx_time is the kernel's receive timestamp, so our own processing latency
 * does not add to the emulated delay.  One process relays both directions.
 *
 * Model per direction (netem with "rate" semantics):
 *   - random loss (seeded) is applied first, before queueing;
 *   - with a rate, a frame starts serializing at max(rx, end of previous frame)
 *     and the backlog still waiting to serialize is a byte-limited drop-tail
 *     queue; with no rate, the limit caps the bytes held in the line;
 *   - departure = max(serialization end + delay + jitter, previous departure),
 *     so frames are never reordered.
 *
 * PACKET_VNET_HDR is used on both sockets so GSO super-frames (up to 64 KB)
 * and CHECKSUM_PARTIAL frames are relayed intact: no need to disable offloads.
 *
 * Interface: prints "ready" on stdout once both sockets are bound.  SIGUSR1
 * writes one JSON line of counters to stderr ({"ab":{rx,tx,drop_loss,
 * drop_queue,rx_bytes,tx_bytes,tx_err,rx_err,kernel_drops,queued,late_1ms,
 * late_budget,late_max_us,late_window_max_us},"ba":{...},"ts_fallback":N}):
 * late_budget counts frames released more than --late-budget-us (default
 * 500) after their due time, the harness's error budget; late_window_max_us
 * is the worst lateness since the previous dump, so a harness polling once a
 * second sees each second's worst.  --rt-prio N asks for SCHED_FIFO
 * so busy emulated hosts cannot make frames late.
 *
 * Exit codes: 0 on SIGTERM/SIGINT, 1 on unexpected errors, 2 on bad
 * arguments, 3 "interface gone" when an interface does not exist (any more),
 * so a launcher can tell "relink and restart" apart from real failures.
 * An interface that is merely down is waited for (its frames are dropped).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <math.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef VIRTIO_NET_HDR_GSO_UDP_L4
#define VIRTIO_NET_HDR_GSO_UDP_L4 5         /* older uapi headers lack it */
#endif
#define VNET_LEN   ((uint32_t)sizeof(struct virtio_net_hdr))
#define MAX_FRAME  (65536 + 512)            /* largest GSO super-frame + slack */
#define SLOT_LEN   (VNET_LEN + MAX_FRAME)
#define BATCH      64                       /* recvmmsg / sendmmsg batch */
#define RX_BUDGET  4                        /* batches per wakeup per socket */
#define QSLOTS     65536                    /* frame descriptors per direction */
/* Timing.  We ask to wake WAKE_NS before the head frame is due (hrtimer
 * wakeups on this VM land ~20 us late at the median), then send every frame
 * due within EARLY_NS: under load one wakeup serves a burst instead of one
 * frame, and no frame leaves more than 50 us early. */
#define EARLY_NS   50000
#define WAKE_NS    20000
#define HOLDOFF_MAX 500000    /* longest RX coalescing pause, see main loop */
#define POLL_IDLE_NS 5000000  /* longest a queued direction's port goes unread */
#define MIN_LIMIT  (64 * 1024)
#define NS         1000000000LL

struct frame { int64_t due; uint32_t off, len; };   /* len incl. vnet hdr */

struct dir {
    const char *name;
    int rx_fd, tx_fd;
    double delay, jitter, loss, rate;   /* s, s, fraction, bit/s */
    uint64_t limit;                     /* bytes, see model above */
    uint64_t loss_rng, jit_rng;
    struct frame *q; uint32_t head, count;
    uint8_t *buf; uint64_t bcap, wpos, held;
    int64_t tx_end, last_due;           /* serialization end, last departure */
    uint64_t rx, tx, drop_loss, drop_queue, rx_bytes, tx_bytes, tx_err, rx_err;
    uint64_t late_1ms, late_budget;     /* scheduling accuracy diagnostics */
    int64_t late_max, late_window_max;
};

struct port { const char *name; int ifindex; int fd; };

static struct port ports[2];
static struct dir dirs[2];              /* [0] = A->B, [1] = B->A */
static uint64_t ports_kdrops[2];        /* PACKET_STATISTICS resets on read */
static uint64_t ts_fallback;            /* frames without a usable timestamp */
static uint8_t *scratch;                /* BATCH receive slots */
static int64_t late_budget_ns = 500000; /* --late-budget-us */

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

/* splitmix64: tiny, good quality, and fully determined by --seed. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double rng_unit(uint64_t *s) { return (rng_next(s) >> 11) * 0x1.0p-53; }

static void die(int code, const char *fmt, const char *arg)
{
    fprintf(stderr, "delayline: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(code);
}

static void warn_once(int *flag, const char *what, int err)
{
    if (!*flag) {
        *flag = 1;
        fprintf(stderr, "delayline: %s: %s (further occurrences only counted)\n",
                what, strerror(err));
    }
}

/* Exit 3 if a port's interface no longer exists under the same name+index. */
static void check_ports(void)
{
    char name[IF_NAMESIZE];
    for (int i = 0; i < 2; i++)
        if (!if_indextoname(ports[i].ifindex, name) || strcmp(name, ports[i].name))
            die(3, "interface gone: %s", ports[i].name);
}

static int is_iface_errno(int e) { return e == ENETDOWN || e == ENXIO || e == ENODEV; }

/* SIGUSR1: one JSON line of counters on stderr.  kernel_drops are frames
 * the kernel discarded because our receive buffer was full. */
static void dump_stats(void)
{
    char line[1024]; int n = 0;
    for (int i = 0; i < 2; i++) {
        struct tpacket_stats st; socklen_t l = sizeof st;
        if (!getsockopt(ports[i].fd, SOL_PACKET, PACKET_STATISTICS, &st, &l))
            ports_kdrops[i] += st.tp_drops;             /* reading resets them */
    }
    n += snprintf(line + n, sizeof line - n, "{");
    for (int i = 0; i < 2; i++) {
        struct dir *d = &dirs[i];
        n += snprintf(line + n, sizeof line - n,
            "\"%s\":{\"rx\":%" PRIu64 ",\"tx\":%" PRIu64 ",\"drop_loss\":%" PRIu64
            ",\"drop_queue\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"tx_bytes\":%" PRIu64
            ",\"tx_err\":%" PRIu64 ",\"rx_err\":%" PRIu64 ",\"kernel_drops\":%" PRIu64
            ",\"queued\":%u,\"late_1ms\":%" PRIu64 ",\"late_budget\":%" PRIu64
            ",\"late_max_us\":%" PRId64 ",\"late_window_max_us\":%" PRId64 "},",
            d->name, d->rx, d->tx, d->drop_loss, d->drop_queue, d->rx_bytes,
            d->tx_bytes, d->tx_err, d->rx_err, ports_kdrops[i], d->count, d->late_1ms,
            d->late_budget, d->late_max / 1000, d->late_window_max / 1000);
        d->late_window_max = 0;
    }
    snprintf(line + n, sizeof line - n, "\"ts_fallback\":%" PRIu64 "}\n", ts_fallback);
    fputs(line, stderr);
    fflush(stderr);
}

/*
 * Bytes this frame occupies on the wire: a GSO super-frame becomes
 * ceil(payload / gso_size) segments, each repeating the headers, so the
 * rate limit charges what the segmented link would really carry.
 */
static uint64_t wire_len(const uint8_t *p, uint32_t len)
{
    const struct virtio_net_hdr *h = (const void *)p;
    uint32_t flen = len - VNET_LEN, hl;
    uint8_t g = h->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
    if (g == VIRTIO_NET_HDR_GSO_NONE || !h->gso_size ||
        !(h->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) || h->csum_start + 20u > flen)
        return flen;
    hl = h->csum_start + (g == VIRTIO_NET_HDR_GSO_UDP_L4 ? 8u
                          : ((p[VNET_LEN + h->csum_start + 12] >> 4) * 4u));
    if (hl >= flen)
        return flen;
    uint64_t segs = (flen - hl + h->gso_size - 1) / h->gso_size;
    return flen + (segs - 1) * hl;
}

/* Reserve len contiguous bytes in the byte ring; UINT64_MAX if no room.
 * Frames are stored back to back and freed in FIFO order, so live data is
 * [oldest, wpos) or, once wrapped, [oldest, end) + [0, wpos). */
static uint64_t ring_alloc(struct dir *d, uint32_t len)
{
    if (d->count == QSLOTS)
        return UINT64_MAX;
    if (d->count == 0)
        d->wpos = 0;
    uint64_t oldest = d->count ? d->q[d->head].off : d->bcap, at;
    if (d->count && d->wpos > oldest) {
        if (d->wpos + len <= d->bcap) at = d->wpos;
        else if (len < oldest) at = 0;          /* wrap, wasting the tail */
        else return UINT64_MAX;
    } else if (d->wpos + len < oldest) {
        at = d->wpos;
    } else {
        return UINT64_MAX;
    }
    d->wpos = at + len;
    return at;
}

/*
 * Queue one received frame (src = vnet hdr + frame).  vlan_tci >= 0 means the
 * kernel stripped an 802.1Q tag into auxdata; re-insert it, since the far
 * side must see exactly what was sent.
 */
static void enqueue(struct dir *d, const uint8_t *src, uint32_t len, int64_t t_rx,
                    int vlan_tci, uint16_t vlan_tpid)
{
    uint32_t extra = vlan_tci >= 0 ? 4 : 0, tot = len + extra;
    d->rx++;
    d->rx_bytes += tot - VNET_LEN;
    if (d->loss > 0 && rng_unit(&d->loss_rng) < d->loss) {
        d->drop_loss++;
        return;
    }
    int64_t due, tx_end = d->tx_end;
    if (d->rate > 0) {
        uint64_t backlog = tx_end > t_rx ? (uint64_t)((tx_end - t_rx) * d->rate / 8e9) : 0;
        uint64_t w = wire_len(src, len) + extra;
        if (backlog + w > d->limit) { d->drop_queue++; return; }
        tx_end = (tx_end > t_rx ? tx_end : t_rx) + (int64_t)(w * 8e9 / d->rate);
        due = tx_end + (int64_t)(d->delay * 1e9);
    } else {
        if (d->held + tot > d->limit) { d->drop_queue++; return; }
        due = t_rx + (int64_t)(d->delay * 1e9);
    }
    if (d->jitter > 0) {
        due += (int64_t)((rng_unit(&d->jit_rng) * 2 - 1) * d->jitter * 1e9);
        if (due < t_rx) due = t_rx;
    }
    if (due < d->last_due) due = d->last_due;         /* never reorder */
    uint64_t off = ring_alloc(d, tot);
    if (off == UINT64_MAX) { d->drop_queue++; return; }
    d->tx_end = tx_end;
    d->last_due = due;
    uint8_t *dst = d->buf + off;
    if (extra) {
        struct virtio_net_hdr h;
        memcpy(&h, src, VNET_LEN);
        if (h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) h.csum_start += 4;
        if (h.hdr_len) h.hdr_len += 4;
        memcpy(dst, &h, VNET_LEN);
        memcpy(dst + VNET_LEN, src + VNET_LEN, 12);            /* MACs */
        uint16_t tag[2] = { htons(vlan_tpid), htons((uint16_t)vlan_tci) };
        memcpy(dst + VNET_LEN + 12, tag, 4);
        memcpy(dst + VNET_LEN + 16, src + VNET_LEN + 12, len - VNET_LEN - 12);
    } else {
        memcpy(dst, src, len);
    }
    struct frame *f = &d->q[(d->head + d->count) % QSLOTS];
    f->due = due; f->off = (uint32_t)off; f->len = tot;
    d->count++;
    d->held += tot;
}

static void pop(struct dir *d)
{
    d->held -= d->q[d->head].len;
    d->head = (d->head + 1) % QSLOTS;
    d->count--;
}

/* Send every frame due by now (+EARLY_NS).  Returns when the queue head is
 * not due yet, or the socket is temporarily full (EAGAIN: retry later). */
static void flush(struct dir *d, int64_t now)
{
    static int warned_tx;
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    while (d->count && d->q[d->head].due <= now + EARLY_NS) {
        int n = 0;
        for (; n < BATCH && (uint32_t)n < d->count; n++) {
            struct frame *f = &d->q[(d->head + n) % QSLOTS];
            if (f->due > now + EARLY_NS) break;
            iov[n] = (struct iovec){ d->buf + f->off, f->len };
            m[n] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[n], .msg_iovlen = 1 } };
        }
        int r = sendmmsg(d->tx_fd, m, n, MSG_DONTWAIT);
        if (r < 0) {
            /* Send buffer full (16 MB, so only under extreme load): retry on
             * the next loop pass, which does not sleep while frames are due. */
            if (errno == EAGAIN || errno == EINTR) return;
            if (is_iface_errno(errno)) check_ports();   /* exits if deleted */
            /* The head frame is unsendable (interface down, oversize,
             * qdisc drop...): drop it, loudly but once. */
            warn_once(&warned_tx, "send failed, frame dropped", errno);
            d->tx_err++;
            pop(d);
            continue;
        }
        for (int i = 0; i < r; i++) {
            int64_t late = now - d->q[d->head].due;
            if (late > d->late_max) d->late_max = late;
            if (late > d->late_window_max) d->late_window_max = late;
            if (late > 1000000) d->late_1ms++;
            if (late > late_budget_ns) d->late_budget++;
            d->tx++;
            d->tx_bytes += d->q[d->head].len - VNET_LEN;
            pop(d);
        }
    }
}

/* Drain the socket of one port into its direction's queue; returns frames read. */
static int receive(struct dir *d)
{
    static int warned_rx, warned_trunc;
    static struct mmsghdr m[BATCH];
    static struct iovec iov[BATCH];
    static char ctl[BATCH][256];
    int got = 0;
    for (int round = 0; round < RX_BUDGET; round++) {
        for (int i = 0; i < BATCH; i++) {
            iov[i] = (struct iovec){ scratch + (size_t)i * SLOT_LEN, SLOT_LEN };
            m[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1,
                                                  .msg_control = ctl[i],
                                                  .msg_controllen = sizeof ctl[i] } };
        }
        int n = recvmmsg(d->rx_fd, m, BATCH, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return got;
            if (is_iface_errno(errno)) { check_ports(); return got; }  /* down: wait */
            /* e.g. EINVAL: a frame whose GSO type has no vnet-hdr mapping;
             * the kernel already discarded it. */
            warn_once(&warned_rx, "receive failed, frame dropped", errno);
            d->rx_err++;
            continue;
        }
        /* Kernel stamps are CLOCK_REALTIME; we schedule on CLOCK_MONOTONIC
         * (immune to clock steps), so convert via the frame's age. */
        int64_t real = now_ns(CLOCK_REALTIME), mono = now_ns(CLOCK_MONOTONIC);
        got += n;
        for (int i = 0; i < n; i++) {
            struct msghdr *h = &m[i].msg_hdr;
            if ((h->msg_flags & MSG_TRUNC) || m[i].msg_len < VNET_LEN + 14) {
                warn_once(&warned_trunc, "oversized/runt frame dropped", EMSGSIZE);
                d->rx_err++;
                continue;
            }
            int64_t t_rx = -1;
            int vlan = -1; uint16_t tpid = ETH_P_8021Q;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    int64_t age = real - ((int64_t)ts.tv_sec * NS + ts.tv_nsec);
                    if (age >= 0 && age < NS) t_rx = mono - age;
                } else if (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA) {
                    struct tpacket_auxdata a;
                    memcpy(&a, CMSG_DATA(c), sizeof a);
                    if (a.tp_status & TP_STATUS_VLAN_VALID) {
                        vlan = a.tp_vlan_tci;
                        if (a.tp_status & TP_STATUS_VLAN_TPID_VALID) tpid = a.tp_vlan_tpid;
                    }
                }
            }
            if (t_rx < 0) { ts_fallback++; t_rx = mono; }
            enqueue(d, iov[i].iov_base, m[i].msg_len, t_rx, vlan, tpid);
        }
        if (n < BATCH) return got;
    }
    return got;
}

static int open_port(struct port *p)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) die(1, "socket(AF_PACKET): %s (need CAP_NET_RAW)", strerror(errno));
    int one = 1, big = 16 << 20;
    /* Our own sends would otherwise loop back into our receive queue. */
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) ||
        setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) ||
        setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one))
        die(1, "setsockopt: %s", strerror(errno));
    /* Big buffers absorb bursts while we sleep; FORCE ignores rmem_max. */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big))
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big))
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                               .sll_ifindex = p->ifindex };
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll)) {
        if (errno == ENODEV || errno == ENXIO) die(3, "interface gone: %s", p->name);
        die(1, "bind: %s", strerror(errno));
    }
    /* Frames for other MACs must be relayed too (veth passes them anyway). */
    struct packet_mreq mr = { .mr_ifindex = p->ifindex, .mr_type = PACKET_MR_PROMISC };
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
    return fd;
}

static void setup_dir(struct dir *d, const char *name, int rx, int tx, uint64_t seed,
                      int has_limit)
{
    d->name = name; d->rx_fd = rx; d->tx_fd = tx;
    /* Separate streams: jitter draws must not shift the loss pattern. */
    d->loss_rng = seed * 4 + (d == &dirs[0] ? 1 : 2);
    d->jit_rng = seed * 4 + (d == &dirs[0] ? 3 : 4) + 0x5851f42d4c957f2dULL;
    /* Default drop-tail limit: bandwidth x delay, at least 64 KB (same rule
     * as Direction.default_limit() in delayline.py). */
    if (!has_limit && d->rate > 0) {
        d->limit = (uint64_t)(d->rate / 8 * d->delay);
        if (d->limit < MIN_LIMIT) d->limit = MIN_LIMIT;
    }
    /* Ring memory = queue + bytes in propagation; an unlimited direction is
     * sized for ~8 Gbit/s.  Bounded at 256 MB; beyond that frames drop. */
    double bytes_per_s = d->rate > 0 ? d->rate / 8 : 1e9;
    double cap = bytes_per_s * (d->delay + d->jitter) + 4.0 * (1 << 20);
    if (d->rate > 0) cap += d->limit;
    else if (has_limit && d->limit + 2.0 * SLOT_LEN < cap) cap = d->limit + 2.0 * SLOT_LEN;
    if (cap > 256.0 * (1 << 20)) cap = 256.0 * (1 << 20);
    d->bcap = (uint64_t)cap;
    if (d->rate <= 0 && !has_limit) d->limit = d->bcap;
    /* MAP_NORESERVE + the ring restarting at 0 whenever it empties: pages
     * only become resident when traffic really needs them. */
    d->buf = mmap(NULL, d->bcap, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    d->q = calloc(QSLOTS, sizeof *d->q);
    if (d->buf == MAP_FAILED || !d->q) die(1, "out of memory%s", "");
}

static void usage(const char *msg)
{
    fprintf(stderr, "delayline: %s\nusage: delayline --if-a A --if-b B [--delay-ab S] "
            "[--delay-ba S] [--jitter-ab S] [--jitter-ba S] [--loss-ab F] [--loss-ba F] "
            "[--rate-ab BPS] [--rate-ba BPS] [--limit-ab BYTES] [--limit-ba BYTES] "
            "[--seed N] [--tag STRING] [--rt-prio N] [--late-budget-us N]\n", msg);
    exit(2);
}

static double parse_num(const char *s, const char *opt, double lo, double hi)
{
    char *end; errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "delayline: invalid value for --%s: '%s' (allowed %g..%g)\n",
                opt, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"if-a", 1, 0, 'a'}, {"if-b", 1, 0, 'b'},
        {"delay-ab", 1, 0, 1}, {"delay-ba", 1, 0, 2}, {"jitter-ab", 1, 0, 3},
        {"jitter-ba", 1, 0, 4}, {"loss-ab", 1, 0, 5}, {"loss-ba", 1, 0, 6},
        {"rate-ab", 1, 0, 7}, {"rate-ba", 1, 0, 8}, {"limit-ab", 1, 0, 9},
        {"limit-ba", 1, 0, 10}, {"seed", 1, 0, 11}, {"tag", 1, 0, 12},
        {"rt-prio", 1, 0, 13}, {"late-budget-us", 1, 0, 14}, {0, 0, 0, 0}};
    int has_limit[2] = {0, 0}, c, rt_prio = 0;
    uint64_t seed = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *o = c > 0 && c <= 14 ? opts[c + 1].name : "";
        switch (c) {
        case 'a': ports[0].name = optarg; break;
        case 'b': ports[1].name = optarg; break;
        case 1: case 2: dirs[c - 1].delay = parse_num(optarg, o, 0, 3600); break;
        case 3: case 4: dirs[c - 3].jitter = parse_num(optarg, o, 0, 3600); break;
        case 5: case 6: dirs[c - 5].loss = parse_num(optarg, o, 0, 1); break;
        case 7: case 8: dirs[c - 7].rate = parse_num(optarg, o, 0, 1e12); break;
        case 9: case 10:
            dirs[c - 9].limit = (uint64_t)parse_num(optarg, o, 1, 1 << 30);
            has_limit[c - 9] = 1;
            break;
        case 11: {
            char *end; errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || *optarg == '-')
                usage("--seed must be a non-negative integer");
            break;
        }
        case 12: break;                                 /* only for pgrep */
        case 13: rt_prio = (int)parse_num(optarg, o, 0, 99); break;
        case 14: late_budget_ns = (int64_t)(parse_num(optarg, o, 1, 1e7) * 1000); break;
        default: usage("unknown option or missing value");
        }
    }
    if (optind < argc) usage("unexpected positional argument");
    if (!ports[0].name || !ports[1].name) usage("--if-a and --if-b are required");
    if (!strcmp(ports[0].name, ports[1].name)) usage("--if-a and --if-b must differ");
    for (int i = 0; i < 2; i++) {
        if (strlen(ports[i].name) >= IF_NAMESIZE) usage("interface name too long");
        if (!(ports[i].ifindex = (int)if_nametoindex(ports[i].name)))
            die(3, "interface gone: %s (not found)", ports[i].name);
    }

    /* Block signals and read them from a signalfd in the event loop. */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM); sigaddset(&ss, SIGINT); sigaddset(&ss, SIGUSR1);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    int sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);   /* a launcher that closed our pipes must not kill us */

    /* Default 50 us timer slack would eat most of our accuracy budget. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    /* The emulated network should not queue behind the emulated hosts for
     * CPU: with a real-time priority our wakeups preempt them.  We never
     * busy-loop, so this cannot starve anyone for long.  Best effort. */
    if (rt_prio > 0) {
        struct sched_param sp = { .sched_priority = rt_prio };
        if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp))
            fprintf(stderr, "delayline: warning: SCHED_FIFO %d unavailable (%s), "
                    "timing may suffer under CPU load\n", rt_prio, strerror(errno));
    }

    for (int i = 0; i < 2; i++) ports[i].fd = open_port(&ports[i]);
    setup_dir(&dirs[0], "ab", ports[0].fd, ports[1].fd, seed, has_limit[0]);
    setup_dir(&dirs[1], "ba", ports[1].fd, ports[0].fd, seed, has_limit[1]);
    scratch = malloc((size_t)BATCH * SLOT_LEN);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!scratch || ep < 0 || sfd < 0) die(1, "setup failed: %s", strerror(errno));
    struct epoll_event ev = { .events = EPOLLIN };
    for (int i = 0; i < 3; i++) {
        ev.data.u32 = i;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, i < 2 ? ports[i].fd : sfd, &ev))
            die(1, "epoll_ctl: %s", strerror(errno));
    }
    /* RX without a wakeup per frame.  Frames carry kernel timestamps, so
     * reading them late costs no accuracy as long as they are read before
     * they are due.  A frame that arrives while its direction's queue holds
     * frames is due after the queue's head (same delay, no reordering), so
     * the wakeup for that head is soon enough: while a queue is non-empty its
     * port's EPOLLIN is off and the port is read at every wakeup, whatever
     * caused it (one recvmmsg, EAGAIN when quiet).  An empty queue has no
     * wakeup of its own coming, so its port's events are back on.  A read
     * that filled the whole budget means more is waiting: poll again after
     * `holdoff` (a quarter of the smallest delay, at most 500 us); otherwise
     * after POLL_IDLE_NS at the latest, which only bounds what bulk traffic
     * (GSO super-frames) leaves in the socket buffer meanwhile.  This halves
     * to thirds the wakeups per frame at the rates of the emulated hosts
     * (a few thousand frames/s per link), where each wakeup costs ~30 us. */
    int64_t holdoff[2], rx_poll_at[2] = {0, 0};
    int rx_armed[2] = {1, 1};
    for (int i = 0; i < 2; i++) {
        holdoff[i] = (int64_t)((dirs[i].delay - dirs[i].jitter) * 1e9 / 4);
        if (holdoff[i] > HOLDOFF_MAX) holdoff[i] = HOLDOFF_MAX;
        if (holdoff[i] < 50000) holdoff[i] = 0;        /* tiny delay: events only */
    }

    printf("ready\n");
    fflush(stdout);

    int64_t last_check = now_ns(CLOCK_MONOTONIC);
    for (;;) {
        int64_t now = now_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < 2; i++) {
            if (rx_armed[i]) continue;
            int got = receive(&dirs[i]);
            rx_poll_at[i] = now + (got >= RX_BUDGET * BATCH ? holdoff[i] : POLL_IDLE_NS);
        }
        flush(&dirs[0], now);
        flush(&dirs[1], now);
        for (int i = 0; i < 2; i++) {
            if (!rx_armed[i] && dirs[i].count == 0) {   /* nothing queued: wake on frames */
                rx_armed[i] = 1;
                ev.data.u32 = i;
                epoll_ctl(ep, EPOLL_CTL_MOD, ports[i].fd, &ev);
            }
        }
        /* Sleep until just before the next departure (or the next RX poll).
         * No busy-polling: idle CPU is ~0 and CPU under load goes to work. */
        int64_t next = INT64_MAX, wait;
        for (int i = 0; i < 2; i++) {
            if (dirs[i].count && dirs[i].q[dirs[i].head].due - WAKE_NS < next)
                next = dirs[i].q[dirs[i].head].due - WAKE_NS;
            if (!rx_armed[i] && rx_poll_at[i] < next)
                next = rx_poll_at[i];
        }
        wait = next == INT64_MAX ? NS : next - now;     /* idle: check in 1 s */
        if (wait > NS) wait = NS;
        if (wait < 0) wait = 0;
        struct timespec to = { wait / NS, wait % NS };
        struct epoll_event evs[4];
        int n = epoll_pwait2(ep, evs, 4, &to, NULL);
        if (n < 0 && errno != EINTR) die(1, "epoll: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            uint32_t id = evs[i].data.u32;
            if (id == 2) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == sizeof si) {
                    if (si.ssi_signo == SIGUSR1) dump_stats();
                    else return 0;
                }
                continue;
            }
            if (evs[i].events & EPOLLERR) {
                /* Interface went down or was deleted: the socket reports
                 * ENETDOWN.  Deleted -> exit 3; merely down -> keep going, the
                 * kernel re-attaches the socket when it comes back up.
                 * (EPOLLERR is reported even while EPOLLIN is paused.) */
                int err = 0; socklen_t l = sizeof err;
                getsockopt(ports[id].fd, SOL_SOCKET, SO_ERROR, &err, &l);
                check_ports();
            }
            if ((evs[i].events & EPOLLIN) && rx_armed[id]) {
                int got = receive(&dirs[id]);
                if (holdoff[id] && dirs[id].count) {    /* queued: its wakeups read us */
                    struct epoll_event off = { .events = 0, .data.u32 = id };
                    rx_armed[id] = 0;
                    rx_poll_at[id] = now_ns(CLOCK_MONOTONIC) +
                                     (got >= RX_BUDGET * BATCH ? holdoff[id] : POLL_IDLE_NS);
                    epoll_ctl(ep, EPOLL_CTL_MOD, ports[id].fd, &off);
                }
            }
        }
        /* Deletion while the interface was already down raises no socket
         * error, so also look every second (cheap, keeps idle CPU ~0). */
        now = now_ns(CLOCK_MONOTONIC);
        if (now - last_check > NS) { check_ports(); last_check = now; }
    }
}
