"""Load a scenario file into the validated model; every error names file, line and field.

YAML is composed into nodes first (so each value keeps its line), duplicate keys are caught
there (PyYAML would silently keep the last one), then pydantic validates the plain data and its
error locations are mapped back to lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from testbed.scenario.model import Scenario

# The loader's own work is bounded, not just the schema: YAML's anchors and aliases let a few
# hundred bytes expand to billions of values ("billion laughs"), and deep nesting exhausts Python's
# stack. The largest shipped scenario is ~6 KB with ~600 values and 7 levels; these bounds are
# two orders of magnitude above that and keep the worst case under a second.
MAX_BYTES = 1 << 20
MAX_DEPTH = 50
MAX_VALUES = 100_000


@dataclass(frozen=True)
class Problem:
    """One error in one place: rendered as `file:line: field: message`."""

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ScenarioError(ValueError):
    """Bad scenario input (exit code 2). `problems` holds each error with its place."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _field_name(loc: tuple) -> str:
    """`workload.topics[0].name`; a key that is not a plain word is quoted (`infrastructure[' ']`),
    so the message stays one readable line."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(str(part)):
            text += f"[{str(part)!r}]"
        else:
            text += f".{part}" if text else str(part)
    return text


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (PyYAML recurses)."""

    def __init__(self, stream, path: str):
        super().__init__(stream)
        self.path, self.depth = path, 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ScenarioError([Problem(self.path, mark.line + 1, "",
                                             f"nested more than {MAX_DEPTH} levels deep; a scenario needs fewer than 10")])
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def compose(text: str, path: str) -> yaml.Node | None:
    """The YAML node graph of `text`, within the loader's bounds (size, depth)."""
    if len(text) > MAX_BYTES:
        raise ScenarioError([Problem(path, 0, "", f"{len(text):,} characters; a scenario is at most {MAX_BYTES:,}")])
    loader = _BoundedLoader(text, path)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class _LineMap:
    """Converts composed YAML nodes to plain data while remembering each path's line; counts the
    values it makes, so aliases cannot multiply the work beyond MAX_VALUES."""

    def __init__(self, path: str):
        self.path = path
        self.lines: dict[tuple, int] = {}
        self.values = 0
        self._constructor = yaml.SafeLoader("")

    def _scalar(self, node: yaml.Node, loc: tuple):
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as error:  # an unknown tag such as !!python/object
            raise ScenarioError([Problem(self.path, node.start_mark.line + 1, _field_name(loc),
                                         f"not valid YAML: {error.problem}")]) from None
        except (ValueError, OverflowError) as error:  # e.g. an integer of more than 4,300 digits
            raise ScenarioError([Problem(self.path, node.start_mark.line + 1, _field_name(loc),
                                         f"{node.value[:20]!r}...: not a usable value ({str(error).split(';')[0]})")]) from None

    def convert(self, node: yaml.Node, loc: tuple = ()):
        self.values += 1
        if self.values > MAX_VALUES:
            raise ScenarioError([Problem(self.path, node.start_mark.line + 1, _field_name(loc),
                                         f"the document expands to more than {MAX_VALUES:,} values "
                                         "(anchors and aliases multiply what they repeat)")])
        self.lines[loc] = node.start_mark.line + 1
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            raise ScenarioError([Problem(self.path, node.start_mark.line + 1, _field_name(loc),
                                         f"not valid YAML: the tag {node.tag!r} is not allowed")])
        if isinstance(node, yaml.MappingNode):
            result = {}
            for key_node, value_node in node.value:
                scalar = isinstance(key_node, yaml.ScalarNode)  # a list or mapping as key is never constructed
                key = self._scalar(key_node, loc) if scalar else None
                if not isinstance(key, str):
                    shown = repr(key) if scalar else "that is a list or mapping"
                    raise ScenarioError([Problem(self.path, key_node.start_mark.line + 1, _field_name(loc),
                                                 f"key {shown} is not a string")])
                if key in result:
                    raise ScenarioError([Problem(self.path, key_node.start_mark.line + 1, _field_name(loc + (key,)),
                                                 f"duplicate key {key!r} (first on line {self.lines[loc + (key,)]})")])
                self.lines[loc + (key,)] = key_node.start_mark.line + 1
                result[key] = self.convert(value_node, loc + (key,))
                self.lines[loc + (key,)] = key_node.start_mark.line + 1
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, loc + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node, loc)

    def line_for(self, loc: tuple) -> int:
        """The line of the deepest part of `loc` that exists in the file (a missing key -> its parent)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return 0


def _message(error: dict, allowed: dict[tuple, list[str]]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = tuple(error["loc"][:-1])
        names = allowed.get(parent)
        hint = f"; allowed: {', '.join(names)}" if names else ""
        return f"unknown key {error['loc'][-1]!r}{hint}"
    if kind == "missing":
        return "is required but missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        return message[len("Value error, "):]
    if message.startswith("Assertion failed, "):
        return message[len("Assertion failed, "):]
    value = error.get("input")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return f"{value!r}: {message[0].lower()}{message[1:]}"
    return message


def _allowed_keys(loc: tuple, data) -> list[str] | None:
    """Field names of the model at `loc`, to tell the user what is allowed instead of a typo."""
    model = Scenario
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for candidate in candidates:
            for inner in [candidate, *getattr(candidate, "__args__", ())]:
                if isinstance(inner, type) and hasattr(inner, "model_fields"):
                    model = inner
                    break
            else:
                continue
            break
        else:
            return None
    return list(model.model_fields)


def parse_text(text: str, path: str = "<string>") -> Scenario:
    """Validate scenario text; raises ScenarioError naming file, line and field."""
    if "\t" in text:
        line = text[: text.index("\t")].count("\n") + 1
        raise ScenarioError([Problem(path, line, "", "tab character: YAML indentation must use spaces")])
    try:
        node = compose(text, path)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 0
        raise ScenarioError([Problem(path, line, "", f"not valid YAML: {error.problem}")]) from None
    except yaml.reader.ReaderError as error:  # a control character YAML does not allow
        line = text[:error.position].count("\n") + 1
        raise ScenarioError([Problem(path, line, "", f"not valid YAML: character {error.character!r} is not allowed")]) from None
    if node is None:
        raise ScenarioError([Problem(path, 1, "", "the file is empty; a scenario is a mapping with name, duration and infrastructure")])
    lines = _LineMap(path)
    data = lines.convert(node)
    if not isinstance(data, dict):
        raise ScenarioError([Problem(path, node.start_mark.line + 1, "", "the top level must be a mapping (key: value), not a list or a scalar")])
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        problems = []
        # A typo'd key shows up as unknown + missing: name the unknown key first, it is the cause.
        for item in sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden"):
            loc = tuple(item["loc"])
            allowed = {loc[:-1]: _allowed_keys(loc[:-1], data) or []} if item["type"] == "extra_forbidden" else {}
            problems.append(Problem(path, lines.line_for(loc), _field_name(loc), _message(item, allowed)))
        raise ScenarioError(problems) from None


def line_of(path: str, loc: tuple) -> int:
    """Line of a field in a scenario file (0 when unknown): for checks made after validation."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        lines = _LineMap(path)
        lines.convert(compose(text, path))
        return lines.line_for(loc)
    except (OSError, yaml.YAMLError, ScenarioError, UnicodeDecodeError):
        return 0


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([Problem(str(path), 0, "", "no such file")]) from None
    except UnicodeDecodeError as error:
        raise ScenarioError([Problem(str(path), 0, "", f"not UTF-8 text ({error.reason})")]) from None
    except OSError as error:
        raise ScenarioError([Problem(str(path), 0, "", error.strerror or str(error))]) from None
    return parse_text(text, str(path))
