"""The broker coordination server (BCS, BAD Pub/Sub 3.1), in the cloud node, on the hub.

- `bad.bcs.register` (request): a subscriber asks for a broker; stage 1 places it (`nr`: the
  broker nearest by network coordinates, the subscriber's against each broker's Serf coordinate;
  `rr`; `rnd`) and the model of eq. 5 gains its subscriptions (from the shared plan).
- `bad.bcs.load`: each broker's measured F_j (testbed.systems.bad.brokerload); `bad.bcs.rates`:
  the back end's lambda_k.
- Every period, Algorithm 1 (testbed.policies.bad.plan) on the loads, and a `migrate` order on
  `bad.ctl.<subscriber>` for each subscriber that moves.

Which loads Algorithm 1 sees: each broker's own measurement where it is fresh, the model's value
(eq. 5 over the known subscriptions and the back end's rates) where a migration or a rate change
touched that broker after the measurement's window began (the measurement still shows the old
state). Both, and which was used, go to the round's event, so the figures show how well they agree.

    python -m testbed.systems.bad.coordinator --nats nats://10.0.0.1:4222 --plan plan.json \\
        --brokers '[{"name": "z1", "address": "nats://10.0.0.2:4222"}]' --placement nr --migration ldm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

from testbed.policies.bad import MIGRATIONS, PLACEMENTS, BalancerConfig, Loads, Placer, cov, plan
from testbed.policies.snapshot import coord_from_dict
from testbed.systems.bad.brokerload import LOADS
from testbed.systems.bad.cluster import RATES
from testbed.systems.pubsub.client import EventLog, connect_nats

REGISTER = "bad.bcs.register"
CONTROL = "bad.ctl"  # bad.ctl.<subscriber>: migrate orders


def control_subject(subscriber: str) -> str:
    return f"{CONTROL}.{subscriber}"


class Coordinator:
    def __init__(self, plan_: dict, brokers: list[dict], placement: str, balancer: BalancerConfig, seed: int,
                 events: EventLog, broker_coordinates=None):
        self.plan, self.brokers, self.balancer, self.events = plan_, brokers, balancer, events
        self.index = {s["id"]: i for i, s in enumerate(plan_["subscribers"])}
        self.broker_index = {b["name"]: j for j, b in enumerate(brokers)}
        self.loads = Loads(len(brokers), [be["rate"] for be in plan_["be"]], len(plan_["subscribers"]))
        self.placer = Placer(placement, len(brokers), seed)
        self.broker_coordinates = broker_coordinates  # () -> [Coordinate | None] per broker, for nr
        self.measured: list[dict | None] = [None] * len(brokers)
        self.changed = [0.0] * len(brokers)  # when a move or a rate change last touched each broker
        self.rounds = 0
        self.nc = None

    def register(self, request: dict) -> dict:
        subscriber = request.get("id")
        if subscriber not in self.index:
            return {"error": f"unknown subscriber {subscriber!r}"}
        i = self.index[subscriber]
        if self.loads.broker[i] < 0:
            distances = None
            if self.placer.kind == "nr":
                distances = self._distances(coord_from_dict(request.get("coord")))
                if distances is None:
                    return {"error": "nr placement: no coordinate yet for the subscriber or a broker, ask again"}
            j = self.placer.place(distances)
            for k in self.plan["subscribers"][i]["subs"]:
                self.loads.subscribe(i, k)
            self.loads.attach(i, j)
            self.changed[j] = time.time()
            self.events.add("bad_placed", subscriber=subscriber, broker=self.brokers[j]["name"],
                            placement=self.placer.kind,
                            estimates_ms=None if distances is None else
                            {b["name"]: round(1e3 * float(d), 3) for b, d in zip(self.brokers, distances)})
        j = int(self.loads.broker[i])
        return {"broker": self.brokers[j]["name"], "address": self.brokers[j]["address"]}

    def _distances(self, mine) -> list[float] | None:
        theirs = self.broker_coordinates() if self.broker_coordinates else []
        if mine is None or not theirs or any(c is None for c in theirs):
            return None
        return [mine.distance_to(c) for c in theirs]

    def on_load(self, report: dict) -> None:
        j = self.broker_index.get(report.get("broker"))
        if j is not None:
            self.measured[j] = report

    def on_rates(self, rates: list[float]) -> None:
        now = time.time()
        for k, rate in enumerate(rates[:self.loads.rates.size]):
            if rate != self.loads.rates[k]:
                self.loads.set_rate(k, rate)
                for j in np.flatnonzero(self.loads.n[:, k] > 0):
                    self.changed[int(j)] = now

    def round(self) -> list[tuple[str, str, str, str]]:
        """Algorithm 1 once; returns (subscriber, source, destination, stage) to order."""
        self.rounds += 1
        model = self.loads.recompute().copy()
        fresh = [m is not None and m["since"] >= self.changed[j] for j, m in enumerate(self.measured)]
        used = np.array([self.measured[j]["F"] if fresh[j] else model[j] for j in range(len(self.brokers))])
        self.loads.F = used.copy()
        result = plan(self.loads, self.balancer)
        self.loads.recompute()
        stages = {m.subscriber: m.stage for m in result.moves}
        orders, now = [], time.time()
        for i, (source, destination) in result.destinations().items():
            subscriber = self.plan["subscribers"][i]["id"]
            orders.append((subscriber, self.brokers[source]["name"], self.brokers[destination]["name"], stages[i]))
            self.changed[source] = self.changed[destination] = now
        names = [b["name"] for b in self.brokers]
        self.events.add("bad_round", round=self.rounds, loads=dict(zip(names, used.round(1).tolist())),
                        model=dict(zip(names, model.round(1).tolist())),
                        measured={n: (round(m["F"], 1) if m else None) for n, m in zip(names, self.measured)},
                        fresh=dict(zip(names, fresh)), subscribers=dict(zip(names, self.loads.counts().tolist())),
                        cov=round(cov(used), 4), cov_model=round(cov(model), 4), mean=round(float(used.mean()), 1),
                        max=round(float(used.max()), 1), shuffled=result.shuffled, moves=len(orders))
        for subscriber, source, destination, stage in orders:
            self.events.add("bad_migration", subscriber=subscriber, source=source, destination=destination,
                            stage=stage, round=self.rounds)
        return orders

    async def serve(self, nc, period: float, stop: asyncio.Event) -> None:
        self.nc = nc

        async def on_register(msg) -> None:
            try:
                answer = self.register(json.loads(msg.data))
            except (ValueError, TypeError) as error:
                answer = {"error": f"bad request: {error}"}
            await msg.respond(json.dumps(answer).encode())

        async def on_load(msg) -> None:
            self.on_load(json.loads(msg.data))

        async def on_rates(msg) -> None:
            self.on_rates(json.loads(msg.data)["rates"])

        await nc.subscribe(REGISTER, cb=on_register)
        await nc.subscribe(LOADS, cb=on_load)
        await nc.subscribe(RATES, cb=on_rates)
        await nc.flush()
        print("ready", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), period)
                break
            except asyncio.TimeoutError:
                pass
            if (self.loads.broker >= 0).any():
                for subscriber, _source, destination, _stage in self.round():
                    address = self.brokers[self.broker_index[destination]]["address"]
                    order = {"type": "migrate", "broker": destination, "address": address, "round": self.rounds}
                    await nc.publish(control_subject(subscriber), json.dumps(order).encode())


def serf_coordinates(names: list[str], max_age_s: float = 2.0):
    """Every broker's coordinate from the cloud node's own Serf agent, refreshed at most every
    `max_age_s` (a register burst of hundreds of subscribers asks once)."""
    from testbed.nc.serf import SerfError, SerfRPC

    state = {"at": float("-inf"), "value": []}

    def get():
        if time.monotonic() - state["at"] > max_age_s:
            try:
                with SerfRPC(timeout=1.0) as rpc:
                    state["value"] = [rpc.coordinate(n) for n in names]
            except (OSError, SerfError):
                state["value"] = []
            state["at"] = time.monotonic()
        return state["value"]

    return get


async def _main(args) -> int:
    plan_ = json.loads(Path(args.plan).read_text())
    brokers = json.loads(args.brokers)
    balancer = BalancerConfig(migration=args.migration, shuffle=args.shuffle, alpha=args.alpha, beta=args.beta,
                              gamma=args.gamma, theta=args.theta)
    coords = serf_coordinates([b["name"] for b in brokers]) if args.placement == "nr" else None
    coordinator = Coordinator(plan_, brokers, args.placement, balancer, args.seed, EventLog(args.events), coords)
    nc = await connect_nats(args.nats, name="bad-bcs")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await coordinator.serve(nc, args.period, stop)
    await nc.drain()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BAD's broker coordination server: placement and Algorithm 1")
    parser.add_argument("--nats", required=True, help="the hub's nats://ip:4222")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--brokers", required=True, help='JSON: [{"name": ..., "address": "nats://ip:4222"}, ...]')
    parser.add_argument("--placement", choices=PLACEMENTS, default="nr")
    parser.add_argument("--migration", choices=MIGRATIONS, default="ldm")
    parser.add_argument("--shuffle", action="store_true")
    defaults = BalancerConfig()
    for name in ("alpha", "beta", "gamma"):
        parser.add_argument(f"--{name}", type=float, default=getattr(defaults, name))
    parser.add_argument("--theta", type=float, help="default: beta")
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--events", type=Path)
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
