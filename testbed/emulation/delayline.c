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
 * late_budget,late_max_us,late_window_max_us},"ba":{...},"ts_fallback":N,"wake_lead_us":N}):
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
 *
 * Shared mode (--control): one process relays every link of a namespace.
 * Links are added and removed by lines on stdin, each answered on stdout:
 *   add ID --if-a A --if-b B [the per-link options above]  ->  "ok ID" | "error ID why"
 *   del ID                                                 ->  "ok ID" | "error ID why"
 * and a link whose interface disappears is dropped with "gone ID" (the
 * process goes on).  A line holds at most 8,190 bytes: a longer one is
 * dropped whole, up to its newline, and answered "error - ..." once; a
 * line with a NUL byte or more than 62 words is refused, never run.  A
 * removed link's slot is taken by the next link added.  One timer serves every link: with --tick-us T, frames
 * leave on a grid of period T, or of the RX holdoff if smaller (each within
 * half a period of its due time), so one wakeup serves every frame of every
 * link due around a grid point; and the ports' receive events are off while
 * a wakeup comes within the holdoff anyway (see RX_SET).  The SIGUSR1 line
 * then sums all links per direction ("ab" = A->B of every link) and adds
 * "links", "wakeups", "rx_holdoffs", "early" (frames sent before their due
 * time), "tick_us" (the grid's period now), "holdoff_us" (how late a
 * port may be read) and "slots" (the link table's length: what every pass
 * scans; at most the most links relayed at once).
 *
 * Routing inside the shaper (shared mode, ModelNet's core: every packet moved
 * through its pipes by one process).  Two more lines tell the relay what the
 * emulated routers do:
 *   hop ID SIDE ROUTER MAC | hop ID SIDE -      -> "ok ID"
 *     frames leaving link ID's direction SIDE (0 = A->B, 1 = B->A) enter
 *     router ROUTER (a small integer) on an interface with address MAC;
 *   route ROUTER IP LINK SIDE SRC DST | route ROUTER IP -   -> "ok ROUTER"
 *     that router sends IPv4 for IP (a /32) into link LINK's direction SIDE,
 *     from Ethernet address SRC to DST.
 * A frame due to leave a hop into a router, addressed to that router's MAC,
 * IPv4 with TTL > 1 and a destination the router has a route for, is not sent
 * into the router's kernel to come back on the next link's port: the relay
 * does what the router would (addresses rewritten, TTL - 1, IP checksum
 * updated) and queues it on the next hop as if received at its due time.  So
 * a path of h hops costs one receive and one send, not h of each, and each
 * hop keeps its own delay, jitter, loss, rate and queue.  Everything else
 * (ARP, a router's own addresses, a destination without a route) goes
 * through the router as before.  "forwarded" counts the frames moved so.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
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
#include <sys/ioctl.h>
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
/* Timing.  We ask to wake `wake_ns` before the head frame is due, then send
 * every frame due within EARLY_NS: under load one wakeup serves a burst
 * instead of one frame, and no frame leaves more than 50 us early.  How late
 * a timer wakeup lands is the VM's (~20 us on a quiet host, 100-200 us when
 * the hypervisor is busy), so `wake_ns` follows it: each wakeup that sends
 * frames moves it WAKE_STEP_NS earlier when most of them left late, later
 * when most left early (a stochastic median: as many frames leave late as
 * early), within [0, WAKE_MAX_NS]. */
#define EARLY_NS   50000
#define WAKE_NS    20000
#define WAKE_STEP_NS 2000
#define WAKE_MAX_NS  300000
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
    int has_limit;
    uint64_t loss_rng, jit_rng;
    struct frame *q; uint32_t head, count;
    uint8_t *buf; uint64_t bcap, wpos, held;
    int64_t tx_end, last_due;           /* serialization end, last departure */
    uint64_t rx, tx, drop_loss, drop_queue, rx_bytes, tx_bytes, tx_err, rx_err;
    uint64_t late_1ms, late_budget, early;  /* scheduling accuracy diagnostics */
    int64_t late_max, late_window_max;
    /* RX without a wakeup per frame, see the main loop */
    int rx_armed;
    int64_t holdoff, rx_poll_at;
    /* Routing inside the shaper: the router this direction's frames enter
     * (-1: a host, or not told) and the address of its interface. */
    int to_router;
    uint8_t to_mac[6];
};

struct port { char name[IF_NAMESIZE]; int ifindex; int fd; uint64_t kdrops; };

/* One link: two ports, a direction each way ([0] = A->B, [1] = B->A). */
struct link {
    long id;
    uint64_t gen;                       /* which start of a slot: its ports' epoll ids carry it */
    int gone;                           /* an interface disappeared: drop at a safe point */
    struct port ports[2];
    struct dir dirs[2];
    uint64_t seed;
};

/* Slots; NULL = free. A relink takes the lowest free slot, and `nslots` is one past the highest
 * used, so every scan is bounded by the links relayed at once, not by every link ever added. A
 * port's epoll id names its slot and the slot's generation: an event already fetched for a link
 * removed in the same pass never reaches the link that took its slot. */
static struct link **links;
static int nslots, slots_cap;
static uint64_t link_gens;              /* starts so far: the next link's `gen` */
#define GEN_SHIFT 32
#define PORT_ID(slot, side, gen) (((gen) << GEN_SHIFT) | (2 + 2 * (uint64_t)(slot) + (side)))

/* Routing inside the shaper (the `hop` and `route` lines).  A hop outlives
 * its link (a killed link is added again with the same id), so hops are kept
 * by link id and applied whenever that link starts. */
struct hop { long link_id; int side, router; uint8_t mac[6]; };
struct route { uint32_t ip; long link_id; int side, slot; uint8_t src[6], dst[6]; };
struct router { struct route *routes; int n, cap; };
#define MAX_ROUTERS 4096
static struct hop *hops;
static int nhops, hops_cap;
static struct router routers[MAX_ROUTERS];
static uint64_t forwarded;              /* frames moved from hop to hop inside the relay */
static int64_t moved_due_min = INT64_MAX; /* earliest due of a frame moved this pass */
static int control;                     /* --control: links come and go on stdin */
static int ep = -1;                     /* epoll: 0 signalfd, 1 stdin, PORT_ID(slot, side, gen) ports */
/* Shared mode: the ports are in an epoll set of their own (ep_ports), itself
 * in `ep` as RX_SET while armed.  It is off while a wakeup comes within
 * `rx_set_holdoff` anyway (that wakeup reads it), and for a holdoff after two
 * of its events came within two holdoffs: at load one wakeup reads many
 * links' frames instead of one wakeup per frame.  Frames carry kernel
 * timestamps, and the holdoff is at most half the smallest delay of any
 * link, so a frame read late is still read before it is due. */
#define RX_SET (1ULL << 62)
static int ep_ports = -1;               /* = ep for a lone relay */
static int rx_set_armed = 1;
static int64_t rx_set_holdoff, rx_set_until, rx_set_last;
static uint64_t rx_set_disarms;
static void rx_set_recompute(void);
static uint64_t ts_fallback;            /* frames without a usable timestamp */
static uint64_t wakeups;                /* loop passes, for the cost per frame */
static uint8_t *scratch;                /* BATCH receive slots */
static int64_t late_budget_ns = 500000; /* --late-budget-us */
/* --tick-us: departures on a grid of this period (shared mode: at most the
 * RX holdoff, see rx_set_recompute); a frame due within half a tick of a grid point leaves at that point (up to half a tick early or
 * late, zero on average), so one wakeup serves every frame of every link due
 * around it.  0: no grid, a frame leaves at most EARLY_NS before its time. */
static int64_t tick_ns, early_ns = EARLY_NS;
static int64_t tick_max_ns;             /* --tick-us; in shared mode at most the RX holdoff */
static void set_tick(int64_t ns)
{
    tick_ns = ns;
    early_ns = tick_ns ? tick_ns / 2 + WAKE_NS : EARLY_NS;
}
static int64_t wake_ns = WAKE_NS;   /* timer lead, adapted (see Timing) */
static int64_t wake_vote;           /* this wakeup's frames: late ones minus early ones */
static int name_fd = -1;                /* for SIOCGIFNAME */

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

/* An interface of this link no longer exists: a lone relay exits 3, a
 * shared one drops the link at the next safe point and says "gone ID". */
static void interface_gone(struct link *l, const char *name)
{
    if (!control) die(3, "interface gone: %s", name);
    l->gone = 1;
}

/* Does each port's interface still exist under the same name and index? */
static void check_ports(struct link *l)
{
    for (int i = 0; i < 2; i++) {
        struct ifreq r = { .ifr_ifindex = l->ports[i].ifindex };
        if (ioctl(name_fd, SIOCGIFNAME, &r) || strcmp(r.ifr_name, l->ports[i].name))
            interface_gone(l, l->ports[i].name);
    }
}

static int is_iface_errno(int e) { return e == ENETDOWN || e == ENXIO || e == ENODEV; }

/* The counters that only grow, per direction: 0 rx, 1 tx, 2 drop_loss,
 * 3 drop_queue, 4 rx_bytes, 5 tx_bytes, 6 tx_err, 7 rx_err, 8 kernel_drops,
 * 9 late_1ms, 10 late_budget, 11 early.  A removed link's are kept in
 * `retired`, so the sums a harness reads never go down. */
#define NCOUNT 12
static uint64_t retired[2][NCOUNT];

static void cumulative(struct link *l, int side, uint64_t c[NCOUNT])
{
    struct dir *d = &l->dirs[side];
    struct tpacket_stats st; socklen_t len = sizeof st;
    if (!getsockopt(l->ports[side].fd, SOL_PACKET, PACKET_STATISTICS, &st, &len))
        l->ports[side].kdrops += st.tp_drops;               /* reading resets them */
    uint64_t v[NCOUNT] = { d->rx, d->tx, d->drop_loss, d->drop_queue, d->rx_bytes, d->tx_bytes,
                           d->tx_err, d->rx_err, l->ports[side].kdrops, d->late_1ms,
                           d->late_budget, d->early };
    memcpy(c, v, sizeof v);
}

/* SIGUSR1: one JSON line of counters on stderr, every link summed per
 * direction.  kernel_drops are frames the kernel discarded because a
 * receive buffer was full. */
static void dump_stats(void)
{
    uint64_t sum[2][NCOUNT];
    int64_t late_max[2] = {0, 0}, late_window_max[2] = {0, 0};
    unsigned queued[2] = {0, 0};
    int count = 0;
    memcpy(sum, retired, sizeof sum);
    for (int s = 0; s < nslots; s++) {
        struct link *l = links[s];
        if (!l) continue;
        count++;
        for (int i = 0; i < 2; i++) {
            struct dir *d = &l->dirs[i];
            uint64_t c[NCOUNT];
            cumulative(l, i, c);
            for (int k = 0; k < NCOUNT; k++) sum[i][k] += c[k];
            queued[i] += d->count;
            if (d->late_max > late_max[i]) late_max[i] = d->late_max;
            if (d->late_window_max > late_window_max[i]) late_window_max[i] = d->late_window_max;
            d->late_window_max = 0;
        }
    }
    char line[1024]; int n = 0;
    static const char *names[2] = {"ab", "ba"};
    n += snprintf(line + n, sizeof line - n, "{");
    for (int i = 0; i < 2; i++)
        n += snprintf(line + n, sizeof line - n,
            "\"%s\":{\"rx\":%" PRIu64 ",\"tx\":%" PRIu64 ",\"drop_loss\":%" PRIu64
            ",\"drop_queue\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"tx_bytes\":%" PRIu64
            ",\"tx_err\":%" PRIu64 ",\"rx_err\":%" PRIu64 ",\"kernel_drops\":%" PRIu64
            ",\"queued\":%u,\"late_1ms\":%" PRIu64 ",\"late_budget\":%" PRIu64
            ",\"early\":%" PRIu64 ",\"late_max_us\":%" PRId64 ",\"late_window_max_us\":%" PRId64 "},",
            names[i], sum[i][0], sum[i][1], sum[i][2], sum[i][3], sum[i][4], sum[i][5],
            sum[i][6], sum[i][7], sum[i][8], queued[i], sum[i][9], sum[i][10], sum[i][11],
            late_max[i] / 1000, late_window_max[i] / 1000);
    snprintf(line + n, sizeof line - n, "\"links\":%d,\"wakeups\":%" PRIu64 ",\"rx_holdoffs\":%" PRIu64
             ",\"ts_fallback\":%" PRIu64 ",\"wake_lead_us\":%" PRId64 ",\"forwarded\":%" PRIu64
             ",\"tick_us\":%" PRId64 ",\"holdoff_us\":%" PRId64 ",\"slots\":%d}\n", count, wakeups, rx_set_disarms,
             ts_fallback, wake_ns / 1000, forwarded, tick_ns / 1000, rx_set_holdoff / 1000, nslots);
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

/* A frame leaves its hop (sent, or moved to the next hop): lateness and
 * counters, then off the queue. */
static void departed(struct dir *d, int64_t now)
{
    int64_t late = now - d->q[d->head].due;
    wake_vote += late > 0 ? 1 : -1;
    if (late > d->late_max) d->late_max = late;
    if (late > d->late_window_max) d->late_window_max = late;
    if (late > 1000000) d->late_1ms++;
    if (late > late_budget_ns) d->late_budget++;
    if (late < 0) d->early++;
    d->tx++;
    d->tx_bytes += d->q[d->head].len - VNET_LEN;
    pop(d);
}

static int find_link(long id);

/* The route the router at the end of this hop has for the frame, or NULL
 * when the router's kernel must see it (not addressed to the router, not
 * IPv4, TTL too small, no route, or the next link is not relayed here). */
static struct route *route_of(struct dir *d, const struct frame *f)
{
    if (d->to_router < 0 || f->len < VNET_LEN + 14 + 20) return NULL;
    const uint8_t *eth = d->buf + f->off + VNET_LEN, *ip = eth + 14;
    if (memcmp(eth, d->to_mac, 6) || eth[12] != 0x08 || eth[13] != 0x00) return NULL;
    if ((ip[0] >> 4) != 4 || ip[8] <= 1) return NULL;
    uint32_t dst;
    memcpy(&dst, ip + 16, 4);
    struct router *r = &routers[d->to_router];
    for (int i = 0; i < r->n; i++) {
        struct route *rt = &r->routes[i];
        if (rt->ip != dst) continue;
        if (rt->slot < 0 || rt->slot >= nslots || !links[rt->slot] || links[rt->slot]->id != rt->link_id)
            rt->slot = find_link(rt->link_id);
        if (rt->slot < 0 || links[rt->slot]->gone || &links[rt->slot]->dirs[rt->side] == d) return NULL;
        return rt;
    }
    return NULL;
}

/* What the router would do with the head frame: new Ethernet addresses,
 * TTL - 1 (IP checksum updated, RFC 1624), and onto the next hop as if
 * received there at the moment it was due to leave this one. */
static void move(struct dir *d, struct route *rt)
{
    struct frame *f = &d->q[d->head];
    uint8_t *eth = d->buf + f->off + VNET_LEN, *ip = eth + 14;
    memcpy(eth, rt->dst, 6);
    memcpy(eth + 6, rt->src, 6);
    uint16_t old = (uint16_t)(ip[8] << 8 | ip[9]);
    ip[8]--;
    uint16_t new = (uint16_t)(ip[8] << 8 | ip[9]);
    uint32_t sum = (uint16_t)~(ip[10] << 8 | ip[11]);
    sum += (uint16_t)~old + new;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    uint16_t check = (uint16_t)~sum;
    ip[10] = check >> 8;
    ip[11] = check & 0xff;
    struct dir *next = &links[rt->slot]->dirs[rt->side];
    uint32_t before = next->count;
    enqueue(next, d->buf + f->off, f->len, f->due, -1, 0);
    if (next->count > before && next->q[(next->head + next->count - 1) % QSLOTS].due < moved_due_min)
        moved_due_min = next->q[(next->head + next->count - 1) % QSLOTS].due;
    forwarded++;
}

/* Send every frame due by now (+EARLY_NS), or move it to its next hop.
 * Returns when the queue head is not due yet, or the socket is temporarily
 * full (EAGAIN: retry later). */
static void flush(struct link *l, struct dir *d, int64_t now)
{
    static int warned_tx;
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    while (d->count && d->q[d->head].due <= now + early_ns && !l->gone) {
        struct route *rt = route_of(d, &d->q[d->head]);
        if (rt) {
            move(d, rt);
            departed(d, now);
            continue;
        }
        int n = 0;
        for (; n < BATCH && (uint32_t)n < d->count; n++) {
            struct frame *f = &d->q[(d->head + n) % QSLOTS];
            if (f->due > now + early_ns || (n && route_of(d, f))) break;
            iov[n] = (struct iovec){ d->buf + f->off, f->len };
            m[n] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[n], .msg_iovlen = 1 } };
        }
        int r = sendmmsg(d->tx_fd, m, n, MSG_DONTWAIT);
        if (r < 0) {
            /* Send buffer full (16 MB, so only under extreme load): retry on
             * the next loop pass, which does not sleep while frames are due. */
            if (errno == EAGAIN || errno == EINTR) return;
            if (is_iface_errno(errno)) check_ports(l);   /* gone if deleted */
            /* The head frame is unsendable (interface down, oversize,
             * qdisc drop...): drop it, loudly but once. */
            warn_once(&warned_tx, "send failed, frame dropped", errno);
            d->tx_err++;
            pop(d);
            continue;
        }
        for (int i = 0; i < r; i++) departed(d, now);
    }
}

/* Drain the socket of one port into its direction's queue; returns frames read. */
static int receive(struct link *l, struct dir *d)
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
            if (is_iface_errno(errno)) { check_ports(l); return got; }  /* down: wait */
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

/* A bound AF_PACKET socket on the port's interface, or -1 with `why` set
 * (*gone when the interface does not exist). */
static int open_port(struct port *p, char *why, size_t wlen, int *gone)
{
    *gone = 0;
    if (!(p->ifindex = (int)if_nametoindex(p->name))) {
        *gone = 1;
        snprintf(why, wlen, "interface gone: %s (not found)", p->name);
        return -1;
    }
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) {
        snprintf(why, wlen, "socket(AF_PACKET): %s (need CAP_NET_RAW)", strerror(errno));
        return -1;
    }
    int one = 1, big = 16 << 20;
    /* Our own sends would otherwise loop back into our receive queue. */
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) ||
        setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) ||
        setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one)) {
        snprintf(why, wlen, "setsockopt: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* Big buffers absorb bursts while we sleep; FORCE ignores rmem_max. */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big))
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big))
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                               .sll_ifindex = p->ifindex };
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll)) {
        *gone = errno == ENODEV || errno == ENXIO;
        snprintf(why, wlen, *gone ? "interface gone: %s" : "bind %s: %s", p->name, strerror(errno));
        close(fd);
        return -1;
    }
    /* Frames for other MACs must be relayed too (veth passes them anyway). */
    struct packet_mreq mr = { .mr_ifindex = p->ifindex, .mr_type = PACKET_MR_PROMISC };
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
    return fd;
}

static int setup_dir(struct dir *d, int side, const char *name, int rx, int tx, uint64_t seed)
{
    d->name = name; d->rx_fd = rx; d->tx_fd = tx;
    d->to_router = -1;
    /* Separate streams: jitter draws must not shift the loss pattern. */
    d->loss_rng = seed * 4 + (side == 0 ? 1 : 2);
    d->jit_rng = seed * 4 + (side == 0 ? 3 : 4) + 0x5851f42d4c957f2dULL;
    /* Default drop-tail limit: bandwidth x delay, at least 64 KB (same rule
     * as Direction.default_limit() in delayline.py). */
    if (!d->has_limit && d->rate > 0) {
        d->limit = (uint64_t)(d->rate / 8 * d->delay);
        if (d->limit < MIN_LIMIT) d->limit = MIN_LIMIT;
    }
    /* Ring memory = queue + bytes in propagation; an unlimited direction is
     * sized for ~8 Gbit/s.  Bounded at 256 MB; beyond that frames drop. */
    double bytes_per_s = d->rate > 0 ? d->rate / 8 : 1e9;
    double cap = bytes_per_s * (d->delay + d->jitter) + 4.0 * (1 << 20);
    if (d->rate > 0) cap += d->limit;
    else if (d->has_limit && d->limit + 2.0 * SLOT_LEN < cap) cap = d->limit + 2.0 * SLOT_LEN;
    if (cap > 256.0 * (1 << 20)) cap = 256.0 * (1 << 20);
    d->bcap = (uint64_t)cap;
    if (d->rate <= 0 && !d->has_limit) d->limit = d->bcap;
    /* MAP_NORESERVE + the ring restarting at 0 whenever it empties: pages
     * only become resident when traffic really needs them. */
    d->buf = mmap(NULL, d->bcap, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    d->q = calloc(QSLOTS, sizeof *d->q);
    if (d->buf == MAP_FAILED || !d->q) return -1;
    /* Reading a port late costs no accuracy while its frames are read
     * before they are due (they carry kernel timestamps): see the main loop.
     * holdoff = a quarter of the smallest delay, at most 500 us; a tiny
     * delay is served by events only. */
    d->rx_armed = 1;
    d->holdoff = (int64_t)((d->delay - d->jitter) * 1e9 / 4);
    if (d->holdoff > HOLDOFF_MAX) d->holdoff = HOLDOFF_MAX;
    if (d->holdoff < 50000) d->holdoff = 0;
    return 0;
}

/* Process-wide options (the command line only). */
struct process_opts { int rt_prio; };

/* Parse link options (and, with `proc`, the process's) from argv into `l`;
 * -1 with `why` set on bad input. */
static int parse_options(int argc, char **argv, struct link *l, struct process_opts *proc,
                         char *why, size_t wlen)
{
    static const struct option opts[] = {
        {"if-a", 1, 0, 'a'}, {"if-b", 1, 0, 'b'},
        {"delay-ab", 1, 0, 1}, {"delay-ba", 1, 0, 2}, {"jitter-ab", 1, 0, 3},
        {"jitter-ba", 1, 0, 4}, {"loss-ab", 1, 0, 5}, {"loss-ba", 1, 0, 6},
        {"rate-ab", 1, 0, 7}, {"rate-ba", 1, 0, 8}, {"limit-ab", 1, 0, 9},
        {"limit-ba", 1, 0, 10}, {"seed", 1, 0, 11}, {"tag", 1, 0, 12},
        {"rt-prio", 1, 0, 13}, {"late-budget-us", 1, 0, 14}, {"control", 0, 0, 15},
        {"tick-us", 1, 0, 16}, {0, 0, 0, 0}};
    /* allowed range of each numeric option, by its code (1..10, 13, 14) */
    static const double lo[17] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0},
                        hi[17] = {0, 3600, 3600, 3600, 3600, 1, 1, 1e12, 1e12, 1 << 30, 1 << 30, 0, 0, 99, 1e7, 0, 10000};
    const char *names[2] = {NULL, NULL};
    int c;
    l->seed = 1;
    opterr = 0;
    optind = 0;                                         /* glibc: start over */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *o = c > 0 && c <= 16 ? opts[c + 1].name : "";
        if (c >= 13 && c <= 16 && !proc) {
            snprintf(why, wlen, "--%s is an option of the process, not of a link", o);
            return -1;
        }
        double v = 0;
        if ((c >= 1 && c <= 10) || c == 13 || c == 14 || c == 16) {
            char *end; errno = 0;
            v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(v) || v < lo[c] || v > hi[c]) {
                snprintf(why, wlen, "invalid value for --%s: '%s' (allowed %g..%g)", o, optarg, lo[c], hi[c]);
                return -1;
            }
        }
        switch (c) {
        case 'a': names[0] = optarg; break;
        case 'b': names[1] = optarg; break;
        case 1: case 2: l->dirs[c - 1].delay = v; break;
        case 3: case 4: l->dirs[c - 3].jitter = v; break;
        case 5: case 6: l->dirs[c - 5].loss = v; break;
        case 7: case 8: l->dirs[c - 7].rate = v; break;
        case 9: case 10: l->dirs[c - 9].limit = (uint64_t)v; l->dirs[c - 9].has_limit = 1; break;
        case 11: {
            char *end; errno = 0;
            l->seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || *optarg == '-') {
                snprintf(why, wlen, "--seed must be a non-negative integer");
                return -1;
            }
            break;
        }
        case 12: break;                                 /* only for pgrep */
        case 13: proc->rt_prio = (int)v; break;
        case 14: late_budget_ns = (int64_t)(v * 1000); break;
        case 15: control = 1; break;
        case 16:  /* a wakeup comes WAKE_NS before its grid point: it sends up to half a tick after */
            tick_max_ns = (int64_t)(v * 1000);
            set_tick(tick_max_ns);
            break;
        default: snprintf(why, wlen, "unknown option or missing value"); return -1;
        }
    }
    if (optind < argc) { snprintf(why, wlen, "unexpected argument '%s'", argv[optind]); return -1; }
    if (control && proc) return 0;                      /* links come on stdin */
    if (!names[0] || !names[1]) { snprintf(why, wlen, "--if-a and --if-b are required"); return -1; }
    if (!strcmp(names[0], names[1])) { snprintf(why, wlen, "--if-a and --if-b must differ"); return -1; }
    for (int i = 0; i < 2; i++) {
        if (strlen(names[i]) >= IF_NAMESIZE) { snprintf(why, wlen, "interface name too long"); return -1; }
        strcpy(l->ports[i].name, names[i]);
    }
    return 0;
}

static void free_link(struct link *l)
{
    for (int i = 0; i < 2; i++) {
        if (l->ports[i].fd > 0) close(l->ports[i].fd);  /* also leaves the epoll set */
        if (l->dirs[i].buf && l->dirs[i].buf != MAP_FAILED) munmap(l->dirs[i].buf, l->dirs[i].bcap);
        free(l->dirs[i].q);
    }
    free(l);
}

/* Open a parsed link's ports and queues and put it in a slot; -1 with `why`
 * (*gone: an interface does not exist). */
static int start_link(struct link *l, char *why, size_t wlen, int *gone)
{
    for (int i = 0; i < 2; i++)
        if ((l->ports[i].fd = open_port(&l->ports[i], why, wlen, gone)) < 0) return -1;
    if (setup_dir(&l->dirs[0], 0, "ab", l->ports[0].fd, l->ports[1].fd, l->seed) ||
        setup_dir(&l->dirs[1], 1, "ba", l->ports[1].fd, l->ports[0].fd, l->seed)) {
        snprintf(why, wlen, "out of memory");
        return -1;
    }
    int slot = 0;
    while (slot < nslots && links[slot]) slot++;        /* the lowest free slot */
    if (slot == slots_cap) {
        if (slots_cap >= (1 << 28)) { snprintf(why, wlen, "too many links"); return -1; }
        slots_cap = slots_cap ? 2 * slots_cap : 16;
        struct link **grown = realloc(links, slots_cap * sizeof *links);
        if (!grown) { snprintf(why, wlen, "out of memory"); return -1; }
        links = grown;
    }
    l->gen = ++link_gens & ((1ULL << (62 - GEN_SHIFT)) - 1);   /* below RX_SET's bit */
    for (int i = 0; i < 2; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = PORT_ID(slot, i, l->gen) };
        if (epoll_ctl(ep_ports, EPOLL_CTL_ADD, l->ports[i].fd, &ev)) {
            snprintf(why, wlen, "epoll_ctl: %s", strerror(errno));
            return -1;
        }
    }
    links[slot] = l;
    if (slot == nslots) nslots++;
    for (int h = 0; h < nhops; h++)
        if (hops[h].link_id == l->id) {
            l->dirs[hops[h].side].to_router = hops[h].router;
            memcpy(l->dirs[hops[h].side].to_mac, hops[h].mac, 6);
        }
    rx_set_recompute();
    return 0;
}

static void remove_link(int slot)
{
    struct link *l = links[slot];
    for (int i = 0; i < 2; i++) {
        uint64_t c[NCOUNT];
        cumulative(l, i, c);
        for (int k = 0; k < NCOUNT; k++) retired[i][k] += c[k];
    }
    links[slot] = NULL;
    while (nslots > 0 && !links[nslots - 1]) nslots--;  /* scans end at the highest link */
    free_link(l);
    rx_set_recompute();
}

static int find_link(long id)
{
    for (int s = 0; s < nslots; s++)
        if (links[s] && links[s]->id == id) return s;
    return -1;
}

static int parse_mac(const char *text, uint8_t mac[6])
{
    unsigned v[6]; char tail;
    if (sscanf(text, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6) return -1;
    for (int i = 0; i < 6; i++) {
        if (v[i] > 255) return -1;
        mac[i] = (uint8_t)v[i];
    }
    return 0;
}

static int parse_int(const char *text, long lo, long hi, long *out)
{
    char *end; errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* `hop ID SIDE ROUTER MAC` or `hop ID SIDE -`: 0, or -1 with `why`. */
static int command_hop(long id, int argc, char **argv, char *why, size_t wlen)
{
    long side, router = -1;
    uint8_t mac[6] = {0};
    if (argc < 4 || parse_int(argv[2], 0, 1, &side)) { snprintf(why, wlen, "expected 'hop ID SIDE ROUTER MAC' or 'hop ID SIDE -'"); return -1; }
    int off = argc == 4 && !strcmp(argv[3], "-");
    if (!off && (argc != 5 || parse_int(argv[3], 0, MAX_ROUTERS - 1, &router) || parse_mac(argv[4], mac))) {
        snprintf(why, wlen, "expected 'hop ID SIDE ROUTER MAC' (ROUTER 0..%d, MAC aa:bb:cc:dd:ee:ff)", MAX_ROUTERS - 1);
        return -1;
    }
    int h = 0;
    while (h < nhops && !(hops[h].link_id == id && hops[h].side == side)) h++;
    if (h == nhops) {
        if (nhops == hops_cap) {
            hops_cap = hops_cap ? 2 * hops_cap : 64;
            struct hop *grown = realloc(hops, hops_cap * sizeof *hops);
            if (!grown) { snprintf(why, wlen, "out of memory"); return -1; }
            hops = grown;
        }
        nhops++;
    }
    hops[h] = (struct hop){ .link_id = id, .side = (int)side, .router = (int)router };
    memcpy(hops[h].mac, mac, 6);
    int slot = find_link(id);
    if (slot >= 0) {
        links[slot]->dirs[side].to_router = (int)router;
        memcpy(links[slot]->dirs[side].to_mac, mac, 6);
        rx_set_recompute();
    }
    return 0;
}

/* `route ROUTER IP LINK SIDE SRC DST` or `route ROUTER IP -`: 0, or -1 with `why`. */
static int command_route(long router, int argc, char **argv, char *why, size_t wlen)
{
    struct in_addr ip;
    long link_id = -1, side = 0;
    struct route rt = { .slot = -1 };
    if (router >= MAX_ROUTERS || argc < 4 || inet_pton(AF_INET, argv[2], &ip) != 1) {
        snprintf(why, wlen, "expected 'route ROUTER IP LINK SIDE SRC DST' or 'route ROUTER IP -' (ROUTER < %d)", MAX_ROUTERS);
        return -1;
    }
    int off = argc == 4 && !strcmp(argv[3], "-");
    if (!off && (argc != 7 || parse_int(argv[3], 0, LONG_MAX, &link_id) || parse_int(argv[4], 0, 1, &side) ||
                 parse_mac(argv[5], rt.src) || parse_mac(argv[6], rt.dst))) {
        snprintf(why, wlen, "expected 'route ROUTER IP LINK SIDE SRC DST'");
        return -1;
    }
    rt.ip = ip.s_addr; rt.link_id = link_id; rt.side = (int)side;
    struct router *r = &routers[router];
    int i = 0;
    while (i < r->n && r->routes[i].ip != rt.ip) i++;
    if (off) {
        if (i < r->n) r->routes[i] = r->routes[--r->n];
        return 0;
    }
    if (i == r->n) {
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 16;
            struct route *grown = realloc(r->routes, r->cap * sizeof *grown);
            if (!grown) { snprintf(why, wlen, "out of memory"); return -1; }
            r->routes = grown;
        }
        r->n++;
    }
    r->routes[i] = rt;
    return 0;
}

/* "error ID why" (ID "-": the line named none) in printable ASCII. */
static void refuse(long id, const char *why)
{
    char text[300];
    snprintf(text, sizeof text, "%s", why);
    for (char *p = text; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '?';
    if (id < 0) printf("error - %s\n", text);
    else printf("error %ld %s\n", id, text);
}

/* One line of the control protocol (see the top of this file): len bytes and a NUL. */
static void command(char *line, size_t len)
{
    char *argv[64], why[256] = "", *save = NULL;
    int argc = 0, too_many = 0;
    if (memchr(line, 0, len)) {                         /* strtok would stop at it: run a prefix */
        refuse(-1, "a NUL byte in the line");
        fflush(stdout);
        return;
    }
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (argc == 63) { too_many = 1; break; }
        argv[argc++] = t;
    }
    argv[argc] = NULL;
    if (argc == 0) return;
    char *end; errno = 0;
    long id = argc > 1 ? strtol(argv[1], &end, 10) : -1;
    if (argc < 2 || errno || *end || id < 0) {
        refuse(-1, "expected 'add ID options', 'del ID', 'hop ID ...' or 'route ROUTER ...'");
    } else if (too_many) {
        refuse(id, "more than 62 words");
    } else if (!strcmp(argv[0], "hop") || !strcmp(argv[0], "route")) {
        int bad = argv[0][0] == 'h' ? command_hop(id, argc, argv, why, sizeof why)
                                    : command_route(id, argc, argv, why, sizeof why);
        if (bad) refuse(id, why);
        else printf("ok %ld\n", id);
    } else if (!strcmp(argv[0], "del")) {
        int slot = find_link(id);
        if (slot < 0) refuse(id, "no such link");
        else { remove_link(slot); printf("ok %ld\n", id); }
    } else if (!strcmp(argv[0], "add")) {
        struct link *l = calloc(1, sizeof *l);
        int gone = 0;
        argv[1] = argv[0];                              /* getopt skips argv[0] */
        if (!l) refuse(id, "out of memory");
        else if (find_link(id) >= 0) { refuse(id, "already relayed"); free(l); }
        else if (l->id = id, parse_options(argc - 1, argv + 1, l, NULL, why, sizeof why) ||
                 start_link(l, why, sizeof why, &gone)) {
            refuse(id, why);
            free_link(l);
        } else {
            printf("ok %ld\n", id);
        }
    } else {
        snprintf(why, sizeof why, "unknown command '%.40s'", argv[0]);
        refuse(id, why);
    }
    fflush(stdout);
}

/* Read what stdin holds and run each whole line; 1 once stdin is closed
 * (the launcher is gone: so are we).  A line longer than the buffer is
 * dropped whole, up to its newline, and refused once: never its tail run. */
#define CONTROL_LINE_MAX 8192
static int read_commands(void)
{
    static char buf[CONTROL_LINE_MAX];
    static size_t used;
    static int dropping;                                /* inside an over-long line */
    ssize_t n = read(STDIN_FILENO, buf + used, sizeof buf - 1 - used);
    if (n == 0) return 1;
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : 1;
    used += (size_t)n;
    buf[used] = 0;
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', used - (size_t)(start - buf)))) {
        *nl = 0;
        if (dropping) dropping = 0;                     /* its end: the next line counts again */
        else command(start, (size_t)(nl - start));
        start = nl + 1;
    }
    used -= (size_t)(start - buf);
    memmove(buf, start, used);
    if (used == sizeof buf - 1) {                       /* no newline in a full buffer */
        if (!dropping) {
            printf("error - a line over %d bytes: dropped\n", CONTROL_LINE_MAX - 2);
            fflush(stdout);
        }
        dropping = 1;
        used = 0;
    }
    return 0;
}

/* Links whose interface disappeared: a shared relay drops them and says so. */
static void reap_gone(void)
{
    for (int s = 0; s < nslots; s++)
        if (links[s] && links[s]->gone) {
            long id = links[s]->id;
            remove_link(s);
            printf("gone %ld\n", id);
            fflush(stdout);
        }
}

static void set_armed(struct link *l, int side, int slot, int armed)
{
    struct epoll_event ev = { .events = armed ? EPOLLIN : 0, .data.u64 = PORT_ID(slot, side, l->gen) };
    l->dirs[side].rx_armed = armed;
    epoll_ctl(ep_ports, EPOLL_CTL_MOD, l->ports[side].fd, &ev);
}

/* The RX set's holdoff: how late a port may be read, at most HOLDOFF_MAX; 0
 * (always armed) when some link is too short for it.  A frame must be read
 * before it is due to leave, less half a grid period and the timer's lead:
 * half the smallest (delay - jitter) of any direction keeps that margin.  A
 * relay that routes only needs it of the directions that enter a router:
 * their frames go on for at least one more hop (the holdoff becomes half
 * their delay plus the smallest of any hop), while what the routers' kernels
 * send into the other directions is their own traffic (ARP, ICMP errors),
 * none of the emulated hosts'. */
static void rx_set_recompute(void)
{
    int64_t h = HOLDOFF_MAX, shortest = INT64_MAX;
    int routing = 0;
    for (int s = 0; s < nslots; s++)
        for (int i = 0; links[s] && i < 2; i++) {
            struct dir *d = &links[s]->dirs[i];
            int64_t own = (int64_t)((d->delay - d->jitter) * 1e9);
            if (own < shortest) shortest = own;
            routing |= d->to_router >= 0;
        }
    for (int s = 0; s < nslots; s++)
        for (int i = 0; links[s] && i < 2; i++) {
            struct dir *d = &links[s]->dirs[i];
            int64_t own = (int64_t)((d->delay - d->jitter) * 1e9);
            if (routing && d->to_router < 0) continue;
            int64_t mine = (routing ? own + shortest : own) / 2;
            if (mine < h) h = mine;
        }
    rx_set_holdoff = h < 50000 ? 0 : h;
    /* A grid no coarser than the holdoff: under load the grid's wakeups then
     * read every port in time, and frames never wake the process. */
    set_tick(rx_set_holdoff && tick_max_ns > rx_set_holdoff ? rx_set_holdoff : tick_max_ns);
}

static void rx_set_arm(int armed)
{
    struct epoll_event ev = { .events = armed ? EPOLLIN : 0, .data.u64 = RX_SET };
    rx_set_armed = armed;
    epoll_ctl(ep, EPOLL_CTL_MOD, ep_ports, &ev);
}

static void port_event(uint64_t id, uint32_t events);

/* Read every armed port that has frames (one epoll_wait on the RX set). */
static void rx_set_read(void)
{
    struct epoll_event evs[64];
    int n;
    do {
        n = epoll_wait(ep_ports, evs, 64, 0);
        for (int e = 0; e < n; e++) port_event(evs[e].data.u64, evs[e].events);
    } while (n == 64);
}

/* A port's event: an error (gone?), or frames to read while it is armed. */
static void port_event(uint64_t id, uint32_t events)
{
    uint64_t low = id & ((1ULL << GEN_SHIFT) - 1);
    int slot = (int)((low - 2) / 2), side = (int)((low - 2) % 2);
    struct link *l = slot < nslots ? links[slot] : NULL;
    if (!l || l->gen != id >> GEN_SHIFT) return;    /* removed by a command this pass */
    if (events & EPOLLERR) {
        /* Interface went down or was deleted: the socket reports ENETDOWN.
         * Deleted -> gone; merely down -> keep going, the kernel
         * re-attaches the socket when it comes back up.  (EPOLLERR is
         * reported even while EPOLLIN is paused.) */
        int err = 0; socklen_t len = sizeof err;
        getsockopt(l->ports[side].fd, SOL_SOCKET, SO_ERROR, &err, &len);
        check_ports(l);
    }
    struct dir *d = &l->dirs[side];
    if ((events & EPOLLIN) && d->rx_armed && !l->gone) {
        int got = receive(l, d);
        if (d->holdoff && d->count) {               /* queued: its head's wakeup reads us */
            d->rx_poll_at = now_ns(CLOCK_MONOTONIC) + (got >= RX_BUDGET * BATCH ? d->holdoff : POLL_IDLE_NS);
            set_armed(l, side, slot, 0);
        }
    }
}

int main(int argc, char **argv)
{
    struct process_opts proc = { 0 };
    char why[256] = "";
    struct link *first = calloc(1, sizeof *first);
    if (!first) die(1, "out of memory%s", "");
    if (parse_options(argc, argv, first, &proc, why, sizeof why)) {
        fprintf(stderr, "delayline: %s\nusage: delayline --if-a A --if-b B [--delay-ab S] "
                "[--delay-ba S] [--jitter-ab S] [--jitter-ba S] [--loss-ab F] [--loss-ba F] "
                "[--rate-ab BPS] [--rate-ba BPS] [--limit-ab BYTES] [--limit-ba BYTES] "
                "[--seed N] [--tag STRING] [--rt-prio N] [--late-budget-us N]\n"
                "   or: delayline --control [--tag STRING] [--rt-prio N] [--late-budget-us N] "
                "(links on stdin)\n", why);
        free(first);
        return 2;
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
    if (proc.rt_prio > 0) {
        struct sched_param sp = { .sched_priority = proc.rt_prio };
        if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp))
            fprintf(stderr, "delayline: warning: SCHED_FIFO %d unavailable (%s), "
                    "timing may suffer under CPU load\n", proc.rt_prio, strerror(errno));
    }

    scratch = malloc((size_t)BATCH * SLOT_LEN);
    ep = epoll_create1(EPOLL_CLOEXEC);
    name_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (!scratch || ep < 0 || sfd < 0 || name_fd < 0) die(1, "setup failed: %s", strerror(errno));
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev)) die(1, "epoll_ctl: %s", strerror(errno));
    ep_ports = ep;
    if (control) {
        free(first);
        ev.data.u64 = 1;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, STDIN_FILENO, &ev)) die(1, "epoll_ctl(stdin): %s", strerror(errno));
        ep_ports = epoll_create1(EPOLL_CLOEXEC);
        ev.data.u64 = RX_SET;
        if (ep_ports < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ep_ports, &ev))
            die(1, "epoll (ports): %s", strerror(errno));
    } else {
        int gone;
        if (start_link(first, why, sizeof why, &gone)) {
            free_link(first);
            die(gone ? 3 : 1, "%s", why);
        }
    }

    printf("ready\n");
    fflush(stdout);

    /* RX without a wakeup per frame.  Frames carry kernel timestamps, so
     * reading them late costs no accuracy as long as they are read before
     * they are due.  A frame that arrives while its direction's queue holds
     * frames is due after the queue's head (same delay, no reordering), so
     * the wakeup for that head is soon enough: while a queue is non-empty its
     * port's EPOLLIN is off and the port is read just before its head leaves
     * (one recvmmsg, EAGAIN when quiet).  An empty queue has no wakeup of its
     * own coming, so its port's events are back on.  A read that filled the
     * whole budget means more is waiting: poll again after `holdoff`;
     * otherwise after POLL_IDLE_NS at the latest, which only bounds what bulk
     * traffic (GSO super-frames) leaves in the socket buffer meanwhile.  This
     * halves to thirds the wakeups per frame at the rates of the emulated
     * hosts, where each wakeup costs ~30 us; in shared mode one wakeup also
     * serves every link with a frame due. */
    int64_t last_check = now_ns(CLOCK_MONOTONIC);
    for (;;) {
        int64_t now = now_ns(CLOCK_MONOTONIC), next = INT64_MAX;
        wakeups++;
        wake_vote = 0;
        moved_due_min = INT64_MAX;
        if (control && !rx_set_armed) rx_set_read();    /* off: every wakeup reads it */
        for (int s = 0; s < nslots; s++) {
            struct link *l = links[s];
            if (!l) continue;
            for (int i = 0; i < 2; i++) {
                struct dir *d = &l->dirs[i];
                int due = d->count && d->q[d->head].due <= now + early_ns;
                if (!d->rx_armed && (due || d->rx_poll_at <= now)) {
                    int got = receive(l, d);
                    d->rx_poll_at = now + (got >= RX_BUDGET * BATCH ? d->holdoff : POLL_IDLE_NS);
                }
                if (due) flush(l, d, now);
                if (!d->rx_armed && d->count == 0 && !l->gone)
                    set_armed(l, i, s, 1);              /* nothing queued: wake on frames */
                /* Sleep until just before the next departure (or RX poll). */
                if (d->count) {
                    int64_t at = d->q[d->head].due;
                    if (tick_ns) at = (at + tick_ns / 2) / tick_ns * tick_ns;   /* its grid point */
                    if (at - wake_ns < next) next = at - wake_ns;
                }
                if (!d->rx_armed && d->rx_poll_at < next) next = d->rx_poll_at;
            }
        }
        if (moved_due_min != INT64_MAX) {               /* onto a hop already passed: its wakeup */
            int64_t at = moved_due_min;
            if (tick_ns) at = (at + tick_ns / 2) / tick_ns * tick_ns;
            if (at - wake_ns < next) next = at - wake_ns;
        }
        reap_gone();
        if (control && rx_set_holdoff) {
            /* Frames carry kernel timestamps: they need reading before they
             * are due, not at once.  While a wakeup comes within the holdoff
             * anyway, the RX set stays off and that wakeup reads it; held
             * off after a burst, it stays off until rx_set_until. */
            int held = rx_set_until > now;
            if (held && rx_set_until < next) next = rx_set_until;
            int arm = !held && !(next != INT64_MAX && next - now <= rx_set_holdoff);
            if (arm != rx_set_armed) rx_set_arm(arm);
        }
        wake_ns += ((wake_vote > 0) - (wake_vote < 0)) * WAKE_STEP_NS;  /* follow the VM's timer lateness */
        if (wake_ns < 0) wake_ns = 0;
        if (wake_ns > WAKE_MAX_NS) wake_ns = WAKE_MAX_NS;
        /* No busy-polling: idle CPU is ~0 and CPU under load goes to work. */
        int64_t wait = next == INT64_MAX ? NS : next - now;     /* idle: check in 1 s */
        if (wait > NS) wait = NS;
        if (wait < 0) wait = 0;
        struct timespec to = { wait / NS, wait % NS };
        struct epoll_event evs[64];
        int n = epoll_pwait2(ep, evs, 64, &to, NULL);
        if (n < 0 && errno != EINTR) die(1, "epoll: %s", strerror(errno));
        for (int e = 0; e < n; e++) {
            uint64_t id = evs[e].data.u64;
            if (id == 0) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == sizeof si) {
                    if (si.ssi_signo == SIGUSR1) dump_stats();
                    else return 0;
                }
                continue;
            }
            if (id == 1) {
                if (read_commands()) return 0;
                continue;
            }
            if (id == RX_SET) {
                int64_t at = now_ns(CLOCK_MONOTONIC);
                rx_set_read();
                /* a second wakeup for frames within two holdoffs: hold the set off */
                if (rx_set_holdoff && at - rx_set_last < 2 * rx_set_holdoff) {
                    rx_set_arm(0);
                    rx_set_until = at + rx_set_holdoff;
                    rx_set_disarms++;
                }
                rx_set_last = at;
                continue;
            }
            port_event(id, evs[e].events);
        }
        /* Deletion while the interface was already down raises no socket
         * error, so also look every second (cheap, keeps idle CPU ~0). */
        now = now_ns(CLOCK_MONOTONIC);
        if (now - last_check > NS) {
            for (int s = 0; s < nslots; s++)
                if (links[s]) check_ports(links[s]);
            last_check = now;
        }
        reap_gone();
    }
}
