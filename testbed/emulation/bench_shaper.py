"""Measure the user-space delay line on this machine (needs root).

Builds h1 <-veth-> [A relay-ns B] <-veth-> h2 in throw-away namespaces and
reports: (a) RTT accuracy for several configured RTTs, (b) the highest rate of
200-byte UDP packets crossing one delayed direction with < 0.1 % loss, (c) TCP
throughput through a 20 ms (each way) link, (d) relay CPU when idle.

``LinkTopology`` is also used by ``tests/test_delayline.py``.

Run:  sudo .venv/bin/python -m testbed.emulation.bench_shaper
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field

from testbed import procs
from testbed.emulation.delayline import (DEFAULT_RT_PRIORITY, Direction, command, ensure_built, link_options,
                                         shared_command)

H1_IP = "10.99.0.1"
H2_IP = "10.99.0.2"
# Locally administered MACs so ARP can be pinned: no ARP frames means the loss
# RNG sees exactly the probe frames, which keeps seeded runs comparable.
H1_MAC = "02:00:0a:63:00:01"
H2_MAC = "02:00:0a:63:00:02"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


@dataclass
class LinkTopology:
    """Three namespaces h1, relay, h2 joined by two veth pairs, plus a relay.

    Namespaces are named ``<prefix><random>-{h1,h2,r}`` and removed by
    ``close()`` (also via ``with``), whatever state they are in.
    """

    prefix: str = "tbbench-"
    a_to_b: Direction = field(default_factory=Direction)
    b_to_a: Direction = field(default_factory=Direction)
    seed: int = 1
    rt_priority: int = DEFAULT_RT_PRIORITY
    shared: bool = False  # relay through a shared relay (--control), the link added on its stdin

    def __post_init__(self) -> None:
        uid = uuid.uuid4().hex[:6]
        self.h1 = f"{self.prefix}{uid}-h1"
        self.h2 = f"{self.prefix}{uid}-h2"
        self.relay_ns = f"{self.prefix}{uid}-r"
        self.tag = f"{self.prefix}{uid}"
        self.proc: subprocess.Popen | None = None
        self._stderr: list[str] = []
        self._created: list[str] = []

    # -- lifecycle -------------------------------------------------------
    def __enter__(self) -> "LinkTopology":
        try:
            self.build()
            self.start_relay()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def build(self) -> None:
        for ns in (self.h1, self.h2, self.relay_ns):
            _run("ip", "netns", "add", ns)
            self._created.append(ns)
        _run(
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            self.h1,
            "address",
            H1_MAC,
            "type",
            "veth",
            "peer",
            "name",
            "A",
            "netns",
            self.relay_ns,
        )
        _run(
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            self.h2,
            "address",
            H2_MAC,
            "type",
            "veth",
            "peer",
            "name",
            "B",
            "netns",
            self.relay_ns,
        )
        for ns in (self.h1, self.h2, self.relay_ns):
            # No IPv6: router solicitations / MLD reports would be extra
            # frames in the relay and shift the seeded loss pattern.
            self.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
            self.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        for ns in (self.h1, self.h2):
            # 500 Mbit/s at 40 ms RTT needs ~2.5 MB windows.
            self.sysctl(ns, "net.ipv4.tcp_rmem", "4096 131072 33554432")
            self.sysctl(ns, "net.ipv4.tcp_wmem", "4096 16384 33554432")
        _run("ip", "-n", self.relay_ns, "link", "set", "A", "up")
        _run("ip", "-n", self.relay_ns, "link", "set", "B", "up")
        for ns, ip, peer_ip, peer_mac in ((self.h1, H1_IP, H2_IP, H2_MAC), (self.h2, H2_IP, H1_IP, H1_MAC)):
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "neigh", "replace", peer_ip, "lladdr", peer_mac, "dev", "eth0", "nud", "permanent")

    @staticmethod
    def sysctl(ns: str, key: str, value: str) -> None:
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}")

    def start_relay(
        self,
        a_to_b: Direction | None = None,
        b_to_a: Direction | None = None,
        seed: int | None = None,
        timeout: float = 5.0,
    ) -> None:
        """(Re)start the relay with new parameters and wait for ``ready``."""
        self.stop_relay()
        self.a_to_b = a_to_b or self.a_to_b
        self.b_to_a = b_to_a or self.b_to_a
        self.seed = self.seed if seed is None else seed
        if self.shared:
            argv = shared_command(ensure_built(), self.tag, rt_priority=self.rt_priority)
        else:
            argv = command(
                ensure_built(), "A", "B", self.a_to_b, self.b_to_a, self.seed, self.tag, rt_priority=self.rt_priority
            )
        self._stderr = []
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.relay_ns, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        threading.Thread(target=self._drain_stderr, args=(self.proc,), daemon=True).start()
        if self.reply(timeout) != "ready":
            err = "".join(self._stderr)
            self.stop_relay()
            raise RuntimeError(f"delay line did not become ready: {err!r}")
        if self.shared:
            reply = self.control("add 0 " + " ".join(link_options("A", "B", self.a_to_b, self.b_to_a, self.seed)))
            if reply != "ok 0":
                self.stop_relay()
                raise RuntimeError(f"the shared delay line refused the link: {reply!r}")

    def reply(self, timeout: float = 5.0) -> str | None:
        """The relay's next stdout line, or None after `timeout` s."""
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        return line[0].strip() if line else None

    def control(self, command_line: str, timeout: float = 5.0) -> str | None:
        """One line to a shared relay's stdin, and its answer."""
        self.proc.stdin.write(command_line + "\n")
        self.proc.stdin.flush()
        return self.reply(timeout)

    def _drain_stderr(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self._stderr.append(line)

    def stats(self, timeout: float = 2.0) -> dict:
        """Ask the relay for its counters (SIGUSR1 -> one JSON line on stderr)."""
        assert self.proc is not None
        n = len(self._stderr)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self._stderr[n:]:
                if line.startswith("{"):
                    return json.loads(line)
            time.sleep(0.01)
        raise TimeoutError("no stats line from delay line")

    def stop_relay(self) -> int | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def close(self) -> None:
        self.stop_relay()
        for ns in self._created:
            # Kill anything still running in the namespace we made, by pid.
            pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _run("ip", "netns", "del", ns, check=False)
        self._created = []

    # -- traffic helpers -------------------------------------------------
    def exec(self, ns: str, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True, **kw)

    def ping(self, count: int, interval: float, timeout: float = 2.0, answered: bool = False) -> dict[int, float]:
        """Ping h2 from h1; returns {icmp_seq: rtt_ms} for the replies received: of exactly `count`
        probes (ping waits two RTTs for the last replies), or with `answered` until `count` replies
        came (a reply a VM stall held back still counts; a lost probe is sent again)."""
        deadline = ["-w", str(procs.ping_deadline_s(count, interval, timeout))] if answered else []
        out = self.exec(self.h1, "ping", "-n", "-c", str(count), "-i", str(interval), "-W", str(timeout), *deadline,
                        H2_IP).stdout
        # Per-reply times have 3 significant digits; the summary has us.
        m = re.search(r"= [\d.]+/([\d.]+)/", out)
        self.last_ping_avg_ms = float(m.group(1)) if m else float("nan")
        return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"icmp_seq=(\d+) .*time=([\d.]+) ms", out)}

    def iperf(self, extra: list[str], seconds: float, omit: int = 0) -> dict:
        """Run iperf3 h1 -> h2 and return its JSON result."""
        server = subprocess.Popen(
            ["ip", "netns", "exec", self.h2, "iperf3", "-s", "-1", "-B", H2_IP],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(50):  # wait for the server to listen
                ss = self.exec(self.h2, "ss", "-Hltn", "sport", "=", ":5201").stdout
                if ss.strip():
                    break
                time.sleep(0.05)
            res = self.exec(
                self.h1,
                "iperf3",
                "-c",
                H2_IP,
                "-J",
                "-t",
                str(seconds),
                "-O",
                str(omit),
                *extra,
                timeout=seconds + omit + 30,
            )
            return json.loads(res.stdout)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()


def bench_rtt(rtts_ms=(10, 40, 100, 200), probes: int = 100) -> list[dict]:
    rows = []
    with LinkTopology() as topo:
        for rtt in rtts_ms:
            d = Direction(delay_s=rtt / 2000)
            topo.start_relay(d, d)
            got = list(topo.ping(probes, 0.01).values())
            med = statistics.median(got) if got else float("nan")
            rows.append(
                {
                    "configured_ms": rtt,
                    "median_ms": med,
                    "avg_ms": topo.last_ping_avg_ms,
                    "p99_ms": procs.percentile(got, 0.99, "nearest") if got else float("nan"),
                    "error_ms": med - rtt,
                    "received": len(got),
                    "sent": probes,
                }
            )
    return rows


def bench_udp(rates_pps=(20000, 40000, 60000, 80000, 100000, 130000, 160000), seconds: int = 3) -> dict:
    """Step the offered 200-byte UDP rate up through a 10 ms one-way delay."""
    rows = []
    best = 0
    with LinkTopology(a_to_b=Direction(delay_s=0.010)) as topo:
        for pps in rates_pps:
            topo.start_relay()  # fresh counters per step
            rcvbuf0 = _udp_rcvbuf_errors(topo, topo.h2)
            cpu0, t0 = _cpu_seconds(topo.proc.pid), time.monotonic()
            res = topo.iperf(["-u", "-l", "200", "-b", str(pps * 200 * 8), "-w", "4M"], seconds)
            cpu = 100 * (_cpu_seconds(topo.proc.pid) - cpu0) / (time.monotonic() - t0)
            s = res["end"]["sum"]
            sent = s.get("packets", 0)
            loss = s.get("lost_percent", 100.0)
            achieved = (sent - s.get("lost_packets", 0)) / seconds
            ab = topo.stats()["ab"]
            rows.append(
                {
                    "offered_pps": pps,
                    "received_pps": round(achieved),
                    "loss_percent": loss,
                    # where losses happened: relay socket / relay queue /
                    # receiving host's socket buffer
                    "relay_kernel_drops": ab["kernel_drops"],
                    "relay_queue_drops": ab["drop_queue"],
                    "receiver_rcvbuf_errors": _udp_rcvbuf_errors(topo, topo.h2) - rcvbuf0,
                    "relay_late_1ms": ab["late_1ms"],
                    "relay_cpu_percent": round(cpu),
                }
            )
            if loss < 0.1 and achieved >= 0.95 * pps:
                best = max(best, pps)
            elif loss >= 1:
                break
    return {"steps": rows, "max_pps_below_0.1pct_loss": best}


def _udp_rcvbuf_errors(topo: LinkTopology, ns: str) -> int:
    """UDP datagrams dropped by full socket buffers in namespace ``ns``."""
    lines = [ln.split() for ln in topo.exec(ns, "cat", "/proc/net/snmp").stdout.splitlines() if ln.startswith("Udp:")]
    return int(dict(zip(lines[0], lines[1]))["RcvbufErrors"])


def bench_tcp(seconds: int = 10, delay_s: float = 0.020) -> dict:
    d = Direction(delay_s=delay_s)
    with LinkTopology(a_to_b=d, b_to_a=d) as topo:
        res = topo.iperf([], seconds, omit=2)
        stats = topo.stats()
    end = res["end"]
    return {
        "rtt_ms": 2000 * delay_s,
        "mbit_s": end["sum_received"]["bits_per_second"] / 1e6,
        "retransmits": end["sum_sent"].get("retransmits"),
        "relay_counters": stats,
    }


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_idle_cpu(seconds: float = 5.0) -> dict:
    d = Direction(delay_s=0.020)
    with LinkTopology(a_to_b=d, b_to_a=d) as topo:
        topo.ping(20, 0.01)  # exercise it first, then let it go idle
        time.sleep(0.5)
        pid = topo.proc.pid
        c0, t0 = _cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = _cpu_seconds(pid), time.monotonic()
    return {"idle_cpu_percent": 100 * (c1 - c0) / (t1 - t0)}


def bench_timer_baseline(samples: int = 200) -> dict:
    """How late this machine wakes a sleeper (5 ms sleeps, Python, no relay).

    Context for the RTT tails: on a busy VM the vCPU itself can stall for
    milliseconds, which no user-space (or kernel) delay line can hide.
    """
    late = []
    for _ in range(samples):
        t0 = time.perf_counter()
        time.sleep(0.005)
        late.append((time.perf_counter() - t0 - 0.005) * 1e3)
    return {
        "sleep_late_p50_ms": statistics.median(late),
        "sleep_late_p99_ms": procs.percentile(late, 0.99, "nearest"),
        "sleep_late_max_ms": max(late),
    }


def run_shaper_benchmark() -> dict:
    """Run all measurements; returns a dict (see module docstring)."""
    if os.geteuid() != 0:
        raise PermissionError("the shaper benchmark needs root (network namespaces)")
    ensure_built()
    return {
        "timer": bench_timer_baseline(),
        "rtt": bench_rtt(),
        "udp": bench_udp(),
        "tcp": bench_tcp(),
        "idle": bench_idle_cpu(),
    }


def _print(result: dict) -> None:
    t = result["timer"]
    print(
        f"machine timer baseline (5 ms sleeps): late p50 {t['sleep_late_p50_ms']:.3f} ms, "
        f"p99 {t['sleep_late_p99_ms']:.3f} ms, max {t['sleep_late_max_ms']:.3f} ms\n"
    )
    print("RTT accuracy (ping, 100 probes at 10 ms; ping prints 3 significant digits)")
    print(f"{'configured':>10} {'median':>8} {'avg':>8} {'p99':>8} {'error':>8} {'recv':>6}")
    for r in result["rtt"]:
        print(
            f"{r['configured_ms']:>8} ms {r['median_ms']:>8.3f} {r['avg_ms']:>8.3f} "
            f"{r['p99_ms']:>8.3f} {r['error_ms']:>+8.3f} {r['received']:>3}/{r['sent']}"
        )
    print("\nUDP 200-byte packets, 10 ms one-way (iperf3 -u -l 200)")
    print(
        f"{'offered pps':>12} {'received pps':>13} {'loss %':>8}   drops: relay-socket "
        f"relay-queue receiver-socket   relay: frames >1ms late, CPU %"
    )
    for r in result["udp"]["steps"]:
        print(
            f"{r['offered_pps']:>12} {r['received_pps']:>13} {r['loss_percent']:>8.3f}   "
            f"{r['relay_kernel_drops']:>19} {r['relay_queue_drops']:>11} "
            f"{r['receiver_rcvbuf_errors']:>15}   {r['relay_late_1ms']:>8} "
            f"{r['relay_cpu_percent']:>5}"
        )
    print(f"max rate with < 0.1 % loss: {result['udp']['max_pps_below_0.1pct_loss']} pps")
    t = result["tcp"]
    print(
        f"\nTCP through {t['rtt_ms']:.0f} ms RTT link (iperf3 10 s): {t['mbit_s']:.0f} Mbit/s, "
        f"{t['retransmits']} retransmits"
    )
    print(f"\nrelay CPU when idle: {result['idle']['idle_cpu_percent']:.2f} %")


if __name__ == "__main__":
    _print(run_shaper_benchmark())
