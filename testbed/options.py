"""How the command line takes its options: each checked as a scenario file's field is (one rule
for both), and every usage error (a bad value, an unknown option, a missing argument) said in one
line naming the command and the option, exit 2, before anything starts.

Nothing here builds the scenario model on import (0.25 s of pydantic schemas): `--help` does not
need it, so a check resolves its model on first use."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click
import typer
from typer.core import TyperCommand, TyperGroup

from testbed.view.server import LOOPBACK, ViewAddressError, check_address

if TYPE_CHECKING:
    from testbed.scenario.model import Scenario


class OneLineErrors(TyperGroup):
    """Usage errors (a bad option value, an unknown option, a missing argument) in one line naming
    the command and the option, exit 2: click prints the usage and a hint around it, four lines
    that a log or a script reads worse than one."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:
            raise _one_line(error) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line(error, ctx) from None


class PlainHelp(TyperCommand):
    """A command's help in plain text: typer escapes its "[default: ...]" and "[required]" for rich
    markup whenever rich is installed, even with markup off (rich_markup_mode=None), so `--help`
    printed "\\[default: ...]"; and the docstring's example stays one line, as it is typed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.help:  # click keeps a paragraph opened by \b as written
            self.help = re.sub(r"^(Example)", "\b\n\\1", self.help, flags=re.MULTILINE)

    def get_help(self, ctx: click.Context) -> str:
        return super().get_help(ctx).replace("\\[", "[")

    def make_context(self, info_name, args, parent=None, **extra):
        """click's parser says "Option '--out' requires an argument." without the command: named here."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            if error.ctx is not None or isinstance(error, OneLineUsageError):
                raise
            path = f"{parent.command_path} {info_name}" if parent is not None else info_name
            raise OneLineUsageError(f"{path}: {error.format_message()}") from None


def plain_help(app: typer.Typer) -> None:
    """Every command of `app` and of its sub-apps helps in plain text (PlainHelp); call it once
    every command is declared."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default; a command's own class is kept
            info.cls = PlainHelp
    for group in app.registered_groups:
        plain_help(group.typer_instance)


class OneLineUsageError(click.ClickException):
    exit_code = 2  # bad input, as click's own usage errors

    def show(self, file=None) -> None:
        print(self.message, file=file or sys.stderr)


def _one_line(error: click.UsageError, ctx: click.Context | None = None) -> click.ClickException:
    if isinstance(error, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return error  # already one line; or the help asked for by giving nothing
    where = error.ctx or ctx
    hint = f" ({where.command_path} --help)" if isinstance(error, click.NoSuchOption) and where else ""
    message = error.format_message()
    if type(error) is click.BadParameter and isinstance(error.param, click.Option):  # without click's "(env var: 'None')"
        message = f"Invalid value for {' / '.join(map(repr, error.param.opts))}: {error.message}"
    return OneLineUsageError(f"{where.command_path if where else 'testbed'}: {message}{hint}")


def checked_as(model: str, field: str):
    """A typer callback checking an option as a scenario file's `field` of `model` (a class of
    testbed.scenario.model, by name) is checked (one rule for both): BadParameter in one line when
    the file would refuse the value."""
    def check(value):
        if value is not None:
            from pydantic import ValidationError

            try:
                adapter = _adapter(model, field)
            except KeyError:  # a system's key, and no registered system declares it
                raise typer.BadParameter(f"no registered system has a {model.lower()}.{field}") from None
            try:
                adapter.validate_python(value)
            except ValidationError as error:
                raise typer.BadParameter(_reason(value, error)) from None
        return value
    return check


@cache
def _adapter(model_name: str, field: str):
    """The pydantic validator of one field, with its model's config (unless it is a model itself)."""
    from pydantic import BaseModel, TypeAdapter

    from testbed.scenario import model as models

    model = getattr(models, model_name)
    info = model.model_fields[field]
    kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    own = isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)  # has its own config
    return TypeAdapter(kind) if own else TypeAdapter(kind, config=model.model_config)


def _reason(value, error) -> str:
    """A pydantic error's first message in one line, after the value it is about."""
    reason = error.errors()[0]["msg"].removeprefix("Value error, ")
    reason = reason[:1].lower() + reason[1:]
    return reason if repr(value) in reason else f"{value}: {reason}"


def at_scale(scenario: Scenario, scale: float | None, path: Path) -> Scenario:
    """The scenario at --scale; a count that no longer fits (client names past their length) is the
    option's error, in one line."""
    from pydantic import ValidationError

    if scale is None:
        return scenario
    try:
        return scenario.with_scale(scale)
    except ValidationError as error:
        raise typer.BadParameter(f"{path}: {_reason(scale, error)}", click.get_current_context(),
                                 param_hint="'--scale'") from None


def view_address(value: str) -> str:
    try:
        check_address(value, 0)
    except ViewAddressError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def view_port(value: int) -> int:
    try:
        check_address(LOOPBACK, value)
    except ViewAddressError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def with_system(scenario: Scenario, system: str | None, path: Path) -> Scenario:
    """The scenario with another system under test (--system), validated again as a file naming it
    would be: a system that does not run the workload's kind is refused with the systems that do. The
    error names the file, the line of `workload.kind` (what the system cannot run) and the option."""
    from pydantic import ValidationError

    from testbed.scenario.loader import Problem, ScenarioError, line_of

    if system is None:
        return scenario
    data = scenario.model_dump(mode="json", exclude_unset=True)
    try:
        return type(scenario).model_validate({**data, "system": system})
    except ValidationError as error:
        reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
        raise ScenarioError([Problem(str(path), line_of(str(path), ("workload", "kind")), "system",
                                     f"--system {system}: {reason}")]) from None
