"""Quantities as people write them in scenarios (`40ms`, `100Mbit`, `1KB`, `200/s`), parsed once.

Every parser returns a plain float in SI base units (seconds, bits per second, bytes,
messages per second, metres per second, fraction) so the rest of the code never sees a string.
Each raises ValueError with a message that says what was expected, e.g.
`'20O/s' is not a rate such as '200/s'`; the scenario loader adds file, line and field.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"

_DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_BANDWIDTH_UNITS = {
    "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
    "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9,
    "bit/s": 1.0, "kbit/s": 1e3, "mbit/s": 1e6, "gbit/s": 1e9,
}
_SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6}
_SPEED_UNITS = {"m/s": 1.0, "km/h": 1000.0 / 3600.0}


def _finite(value: float, text: object, kind: str) -> float:
    """Infinity and NaN (YAML's .inf, .nan, or 1e999) parse as floats; no run can honour them."""
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite {kind.split(' ', 1)[-1]}")
    return value


def _split(text: object, kind: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not {kind} such as {example!r}")
    if isinstance(text, (int, float)):
        try:
            return _finite(float(text), text, kind), ""
        except OverflowError:
            raise ValueError(f"{text!r} is not a finite {kind.split(' ', 1)[-1]}") from None
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not {kind} such as {example!r}")
    match = re.fullmatch(_NUMBER + r"\s*(?P<unit>[^\s0-9][^\s]*)?", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not {kind} such as {example!r}")
    return _finite(float(match["num"]), text, kind), (match["unit"] or "")


def _scaled(text: object, kind: str, example: str, units: dict[str, float], bare_ok: bool) -> float:
    value, unit = _split(text, kind, example)
    if unit == "":
        if bare_ok:
            return value
        raise ValueError(f"{text!r} is not {kind} such as {example!r} (the unit is missing)")
    factor = units.get(unit) if unit in units else units.get(unit.lower())
    if factor is None:
        allowed = ", ".join(sorted(set(units)))
        raise ValueError(f"{text!r} is not {kind} such as {example!r} (units: {allowed})")
    return _finite(value * factor, text, kind)


def parse_duration(text: object) -> float:
    """`40ms`, `1.5s`, `10m`, `500us` -> seconds. A bare number is not accepted: ms or s?"""
    return _scaled(text, "a duration", "40ms", _DURATION_UNITS, bare_ok=False)


def parse_bandwidth(text: object) -> float:
    """`100Mbit`, `1Gbit`, `10mbps` -> bits per second (decimal prefixes, as tc uses)."""
    return _scaled(text, "a bandwidth", "100Mbit", _BANDWIDTH_UNITS, bare_ok=False)


def parse_size(text: object) -> float:
    """`1KB` (1000 B), `998B`, `4KiB` (4096 B) -> bytes; a bare integer means bytes."""
    return _scaled(text, "a size", "1KB", _SIZE_UNITS, bare_ok=True)


def parse_byte_rate(text: object) -> float:
    """`300MB/s`, `20KB/s` -> bytes per second (a data volume per second, as BAD's broker load)."""
    if isinstance(text, str) and text.strip().endswith("/s"):
        return parse_size(text.strip()[:-2])
    raise ValueError(f"{text!r} is not a data rate such as '20KB/s'")


def parse_rate(text: object) -> float:
    """`200/s`, `1.5M/s` -> messages per second."""
    if isinstance(text, str):
        match = re.fullmatch(_NUMBER + r"\s*(?P<suffix>[kKmM]?)\s*/\s*s", text.strip())
        if match:
            return _finite(float(match["num"]), text, "a rate") * _COUNT_SUFFIX[match["suffix"].lower()]
    raise ValueError(f"{text!r} is not a rate such as '200/s'")


def parse_speed(text: object) -> float:
    """`50m/s`, `180km/h` -> metres per second."""
    return _scaled(text, "a speed", "50m/s", _SPEED_UNITS, bare_ok=False)


def parse_fraction(text: object) -> float:
    """`0.5%` -> 0.005; a bare number is already a fraction in [0, 1]."""
    value, unit = _split(text, "a percentage", "0.1%")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise ValueError(f"{text!r} is not a percentage such as '0.1%'")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{text!r} is not between 0% and 100%")
    return value


def format_duration(seconds: float) -> str:
    """Short human form used in tables: 0.0405 -> '40.5ms'."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{seconds * 1e3:.4g}ms"


def format_bandwidth(bps: float) -> str:
    for factor, unit in ((1e9, "Gbit"), (1e6, "Mbit"), (1e3, "kbit")):
        if bps >= factor:
            return f"{bps / factor:g}{unit}"
    return f"{bps:g}bit"
