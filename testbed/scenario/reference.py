"""The scenario reference (docs/guide/scenario-reference.md), rendered from the schema itself.

The pydantic models of `testbed.scenario.model` are the one home of every key, its type, default and
bounds; this module only reads them, so the reference cannot drift from what `testbed validate`
accepts. `python -m testbed.scenario.reference` prints it, `make docs` writes the file, and
tests/test_docs.py fails when the committed file differs from a fresh rendering.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Annotated, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from testbed.policies.distance import DISTANCES
from testbed.policies.initial import INITIAL_PLACEMENTS
from testbed.policies.registry import POLICIES
from testbed import plugin
from testbed.scenario import fields as f
from testbed.scenario import model as m
from testbed.scenario.cities import CITY_CODES

_DURATIONS = "`500us` `40ms` `1.5s` `10m` `2h`"
#: The schema's named value types: what the type column calls them, how a scenario writes them, bounds.
NAMED = (
    (f.PositiveDuration, "duration > 0", _DURATIONS, f"above 0, at most {f.MAX_DURATION_S:,.0f} s (a day)"),
    (f.Duration, "duration", _DURATIONS, f"0 or more, at most {f.MAX_DURATION_S:,.0f} s"),
    (f.Bandwidth, "bandwidth", "`100Mbit` `1Gbit` `10mbps`", f"above 0, at most {f.MAX_BANDWIDTH_BPS:,.0f} bit/s"),
    (f.MessageSize, "message size", "`1KB` (1000 B) `1KiB` (1024 B) `998B`",
     f"above 0, at most {f.NATS_MAX_PAYLOAD_B:,} B (nats-server's maximum payload)"),
    (f.Size, "size", "`10KB` `4KiB` `998B`; a bare integer is bytes", f"above 0, at most {f.MAX_SIZE_B:,.0f} B (1 GiB)"),
    (f.Rate, "rate", "`200/s` `1.5M/s` `20K/s`", f"above 0, at most {f.MAX_RATE_PER_S:,.0f} per second"),
    (f.Speed, "speed", "`50m/s` `180km/h`", f"above 0, at most {f.MAX_SPEED_MPS:,.0f} m/s"),
    (f.ByteRate, "data rate", "`20KB/s` `300MB/s`", f"0 or more, at most {f.MAX_BYTE_RATE:,.0f} B/s"),
    (f.Fraction, "fraction", "`85%` `0.5%`, or a bare number in [0, 1]", ""),
    (f.Name, "name", "a-z, then a-z and 0-9", f"at most {f.NAME_MAX} characters (host and interface names)"),
    (f.TopicName, "topic class", "a-z, then a-z, 0-9 and _", "at most 32 characters"),
    (f.CityCode, "city", ", ".join(CITY_CODES), ""),
    (f.PolicyName, "policy", ", ".join(POLICIES), ""),
    (f.DistanceName, "distance reading", ", ".join(DISTANCES), ""),
    (f.InitialPlacement, "start-up placement", ", ".join(INITIAL_PLACEMENTS), ""),
    (m.ServerName, "server", "`[user@]host`", ""),
)
_BOUNDS = ((at.Ge, "ge", ">= {}"), (at.Gt, "gt", "> {}"), (at.Le, "le", "<= {}"), (at.Lt, "lt", "< {}"),
           (at.MinLen, "min_length", "length >= {}"), (at.MaxLen, "max_length", "length <= {}"))


def fields(cls: type[BaseModel]) -> dict[str, object]:
    """A model's keys with their annotations as written (named types kept), in schema order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {name: hints[name] for name in cls.model_fields}


def _inner(hint) -> tuple:
    """The types a hint wraps (a union's members, a list's items, an Annotated's base)."""
    origin = get_origin(hint)
    if origin is Annotated:
        return get_args(hint)[:1]
    return get_args(hint) if origin in (Union, types.UnionType, list, tuple, dict) else ()


def models(root: type[BaseModel] = m.Scenario) -> dict[type[BaseModel], list[str]]:
    """Every model reachable from `root`, in order of first appearance, with the keys it sits at."""
    found: dict[type[BaseModel], list[str]] = {}

    def visit(cls, path):
        seen = cls in found
        found.setdefault(cls, []).append(path)
        if not seen:
            for name, hint in fields(cls).items():
                visit_hint(hint, f"{path}.{name}" if path else name)

    def visit_hint(hint, path):
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return visit(hint, path)
        suffix = "[]" if get_origin(hint) is list else ""
        for inner in _inner(hint):
            visit_hint(inner, path + suffix)

    visit(root, "")
    return found


def type_text(hint) -> str:
    """A type as the table shows it: a named type, a model (linked), a choice, a list of ..."""
    name = next((name for alias, name, _, _ in NAMED if hint == alias), None)
    origin, args = get_origin(hint), get_args(hint)
    if name:
        return name
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return f"[{hint.__name__}](#{hint.__name__.lower()})"
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(type_text(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is tuple:
        return "pair of " + " and ".join(dict.fromkeys(type_text(a) for a in args))  # "pair of name"
    if origin is dict:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    if origin is Annotated:
        return type_text(args[0])
    return {int: "integer", float: "number", bool: "true or false", str: "text"}.get(hint, str(hint))


def bounds(field: FieldInfo, hint) -> str:
    """The numeric and length bounds on a key: pydantic keeps them on the field, or on the member of
    an optional key's union (`Annotated[int, Field(ge=8)] | None`)."""
    metadata = list(field.metadata)
    for inner in get_args(hint) if get_origin(hint) in (Union, types.UnionType) else ():
        if get_origin(inner) is Annotated and not any(inner == alias for alias, *_ in NAMED):
            metadata += get_args(inner)[1:]
    metadata += [x for item in metadata if isinstance(item, FieldInfo) for x in item.metadata]
    return ", ".join(text.format(getattr(item, attr)) for item in metadata
                     for kind, attr, text in _BOUNDS if isinstance(item, kind))


def flow(value) -> str:
    """A default in YAML's flow style, as a scenario would write it."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return '""' if value == "" else str(value)


def default_text(field: FieldInfo) -> str:
    """A key's default as a scenario would write it (units included), or whether it is required."""
    if field.is_required():
        return "required"
    if field.default is None:
        return "none"
    dumped = TypeAdapter(field.rebuild_annotation()).dump_python(field.default, mode="json", exclude_defaults=True)
    return "its defaults" if isinstance(field.default, BaseModel) and not dumped else f"`{flow(dumped)}`"


def comments(cls: type[BaseModel]) -> dict[str, str]:
    """The comment at the end of each key's line in its class (or a base class), the key's only
    description there. A model made by create_model has no source: its own fields have descriptions."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if issubclass(klass, BaseModel):
            found.update(re.findall(r"^    (\w+):[^#\n]*#\s*(.+)$", source, re.M))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe would end the table cell


def section(cls: type[BaseModel], paths: list[str]) -> list[str]:
    """One model: where it sits, its docstring, and a row per key."""
    notes = comments(cls)
    where = ", ".join(f"`{p}`" for p in paths) if paths != [""] else "the top level of the file"
    lines = [f"## {cls.__name__}", "", f"At {where}.", ""]
    if cls.__doc__:
        lines += [inspect.cleandoc(cls.__doc__), ""]
    lines += ["| key | type | default | bounds | notes |", "|---|---|---|---|---|"]
    for name, hint in fields(cls).items():
        field = cls.model_fields[name]
        note = field.description or notes.get(name, "")
        owner = plugin.control_owner(name) if cls is m.Control else None
        note = f"system {owner.name}'s: {note}" if owner else note  # refused under another system
        lines.append(f"| `{name}` | {_cell(type_text(hint))} | {_cell(default_text(field))} | "
                     f"{_cell(bounds(field, hint))} | {_cell(note)} |")
    return lines + [""]


def fault_targets() -> list[str]:
    """The parts a `kill:` may name beside nodes, each declared by a system (its manifest's
    `fault_targets`) and refused under any other system."""
    rule = {True: "required", False: "refused", None: "optional"}
    lines = ["Besides a node, `kill` may name a part of the system under test:", "",
             "| `kill:` | system | restart_after | what it does |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {system.name} | {rule[target.restart]}{f' ({target.why})' if target.why else ''} | "
              f"{_cell(target.about)} |" for name, (system, target) in plugin.fault_targets().items()]
    return lines + [""]


def render() -> str:
    """The whole reference, as docs/guide/scenario-reference.md holds it."""
    lines = ["# Scenario reference", "",
             "Generated from the schema (`testbed/scenario/model.py` and each system's "
             "`testbed/systems/<name>/schema.py`) by `python -m testbed.scenario.reference` "
             "(`make docs`): do not edit it by hand. [scenarios.md](scenarios.md) explains the format "
             "with an annotated example; rules that tie several keys together are in each model's "
             "description, and `testbed validate` reports any breach as `file:line: field: reason`.", "",
             "## Value types", "", "| type | written as | bounds |", "|---|---|---|"]
    lines += [f"| {name} | {how} | {limit or '-'} |" for _, name, how, limit in NAMED]
    lines.append("")
    for cls, paths in models().items():
        lines += section(cls, paths) + (fault_targets() if cls is m.Fault else [])
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
