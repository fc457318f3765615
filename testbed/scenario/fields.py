"""The scenario schema's value types: units parsed once, names a shell and the kernel can take.

Every identifier that can become a host, interface, container or namespace name goes through
`Name`: a strict alphabet and a length that keeps `<name><index>-eth<N>` inside Linux's 15-byte
interface-name limit, so nothing from a scenario can reach a shell or the kernel unchecked. The
core's models (testbed.scenario.model) and every system's schema fragment build on these.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from testbed import units
from testbed.policies.distance import DISTANCES
from testbed.policies.initial import INITIAL_PLACEMENTS
from testbed.policies.registry import POLICIES
from testbed.policies.topics import CLASS_RE
from testbed.scenario.cities import CITY_CODES

NAME_MAX = 8
NAME_RE = re.compile(r"[a-z][a-z0-9]*")
SCENARIO_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")


def check_name(value: str) -> str:
    """Names become host, interface and container names: a-z, 0-9, at most 8 bytes."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or len(value) > NAME_MAX:
        raise ValueError(
            f"{value!r} is not a valid name: use 1-{NAME_MAX} characters a-z and 0-9, starting with a letter"
        )
    return value


def _check_topic(value: str) -> str:
    if not isinstance(value, str) or not CLASS_RE.fullmatch(value) or len(value) > 32:
        raise ValueError(f"{value!r} is not a valid topic name: use 1-32 characters a-z, 0-9 and _, starting with a letter")
    return value


def check_scenario_name(value: str) -> str:
    if not isinstance(value, str) or not SCENARIO_NAME_RE.fullmatch(value) or len(value) > 40:
        raise ValueError(f"{value!r} is not a valid scenario name: use 1-40 characters a-z, 0-9 and -")
    return value


def _check_city(value: str) -> str:
    if value not in CITY_CODES:
        raise ValueError(f"{value!r} is not a known city; known: {', '.join(CITY_CODES)}")
    return value


def _one_of(names):
    """A value from one of the policies' lists of names (policies, distance readings, start-ups), so
    the schema never lists them itself."""
    def check(value: str) -> str:
        if value not in names:
            quoted = [repr(name) for name in names]
            raise ValueError(f"{value!r}: input should be {', '.join(quoted[:-1])} or {quoted[-1]}")
        return value
    return check


def _non_negative(kind: str):
    def check(value: float) -> float:
        if value < 0:
            raise ValueError(f"a {kind} must not be negative, got {value:g}")
        return value
    return check


def _positive(kind: str):
    def check(value: float) -> float:
        if value <= 0:
            raise ValueError(f"a {kind} must be greater than zero")
        return value
    return check


# What no run on any machine can honour, refused at validation. Each bound is far above
# what a one-machine testbed runs and far below where arithmetic or the tools break:
MAX_DURATION_S = 86_400.0       # a day: any duration or delay (a day of smoke traces is ~10 GB)
MAX_BANDWIDTH_BPS = 100e9       # 100 Gbit/s: beyond any NIC a shaped link stands for (HTB takes 64-bit rates)
MAX_SIZE_B = float(1 << 30)     # 1 GiB: any buffer or size
NATS_MAX_PAYLOAD_B = 1 << 20    # nats-server's default max_payload (roles/launch.py does not raise it)
MAX_RATE_PER_S = 1e6            # 1M msg/s from one publisher: the Python client peaks near 10^4
MAX_SPEED_MPS = 10_000.0        # 10 km/s: smokes compress time (600 m/s); faster, a client crosses a
                                # ~1 km MEC zone in under the 0.1 s a relink takes
MAX_BYTE_RATE = 10e9            # 10 GB/s: any data rate (a BAD subscription's results, a balancer threshold)


def _at_most(kind: str, limit: float, unit: str, why: str):
    def shown(value: float) -> str:
        return f"{value:,.0f}{unit}" if 1e4 <= value < 1e15 and value == int(value) else f"{value:g}{unit}"

    def check(value: float) -> float:
        if value > limit:
            raise ValueError(f"a {kind} of at most {shown(limit)} ({why}), got {shown(value)}")
        return value
    return check


def _signed(parser):
    """Let a leading minus through the unit parser so the error can say 'negative' plainly."""
    def parse(value):
        if isinstance(value, str) and value.strip().startswith("-"):
            return -parser(value.strip()[1:])
        return parser(value)
    return parse


def _unit(suffix: str, factor: float = 1.0):
    """Serialize back into a unit string, so a dumped scenario loads again unchanged."""
    return PlainSerializer(lambda v: None if v is None else f"{v / factor!r}{suffix}", when_used="json")


Name = Annotated[str, AfterValidator(check_name)]
TopicName = Annotated[str, AfterValidator(_check_topic)]
CityCode = Annotated[str, AfterValidator(_check_city)]
PolicyName = Annotated[str, AfterValidator(_one_of(POLICIES))]
DistanceName = Annotated[str, AfterValidator(_one_of(DISTANCES))]
InitialPlacement = Annotated[str, AfterValidator(_one_of(INITIAL_PLACEMENTS))]
_day = AfterValidator(_at_most("duration", MAX_DURATION_S, "s", "a day"))
Duration = Annotated[
    float, BeforeValidator(_signed(units.parse_duration)), AfterValidator(_non_negative("duration")), _day, _unit("s")
]
PositiveDuration = Annotated[
    float, BeforeValidator(_signed(units.parse_duration)), AfterValidator(_positive("duration")), _day, _unit("s")
]
Bandwidth = Annotated[
    float, BeforeValidator(_signed(units.parse_bandwidth)), AfterValidator(_positive("bandwidth")),
    AfterValidator(_at_most("bandwidth", MAX_BANDWIDTH_BPS, "bit/s", "100 Gbit/s")), _unit("bit")
]
Size = Annotated[float, BeforeValidator(_signed(units.parse_size)), AfterValidator(_positive("size")),
                 AfterValidator(_at_most("size", MAX_SIZE_B, "B", "1 GiB")), _unit("B")]
MessageSize = Annotated[Size, AfterValidator(_at_most("message size", NATS_MAX_PAYLOAD_B, "B",
                                                      "nats-server's maximum payload, 1 MiB"))]
Rate = Annotated[float, BeforeValidator(_signed(units.parse_rate)), AfterValidator(_positive("rate")),
                 AfterValidator(_at_most("rate", MAX_RATE_PER_S, "/s", "per publisher; the client peaks near 10^4")),
                 _unit("/s")]
Speed = Annotated[float, BeforeValidator(_signed(units.parse_speed)), AfterValidator(_positive("speed")),
                  AfterValidator(_at_most("speed", MAX_SPEED_MPS, "m/s", "relinks could not keep up")), _unit("m/s")]
ByteRate = Annotated[float, BeforeValidator(_signed(units.parse_byte_rate)), AfterValidator(_non_negative("data rate")),
                     AfterValidator(_at_most("data rate", MAX_BYTE_RATE, "B/s", "10 GB/s")), _unit("B/s")]
Fraction = Annotated[float, BeforeValidator(units.parse_fraction)]
Count = Annotated[int, Field(ge=1, le=100_000)]


def min_max(model, name: str):
    """A {min, max} block's check, for every such block."""
    if model.max < model.min:
        raise ValueError(f"{name}.max must not be smaller than {name}.min")
    return model


class Strict(BaseModel):
    """Unknown keys are errors, values are parsed once and never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
