"""How the command line takes its options: each checked as a scenario file's field is (one rule
for both), and every usage error (a bad value, an unknown option, a missing argument) said in one
line naming the command and the option, exit 2, before anything starts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from testbed.scenario.model import Scenario
from testbed.view.server import LOOPBACK, ViewAddressError, check_address


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


def checked_as(model, field: str):
    """A typer callback checking an option as a scenario file's `field` of `model` is checked (one
    rule for both): BadParameter in one line when the file would refuse the value."""
    from pydantic import BaseModel, TypeAdapter, ValidationError

    info = model.model_fields[field]
    kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    own = isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)  # has its own config
    adapter = TypeAdapter(kind) if own else TypeAdapter(kind, config=model.model_config)

    def check(value):
        if value is not None:
            try:
                adapter.validate_python(value)
            except ValidationError as error:
                raise typer.BadParameter(_reason(value, error)) from None
        return value
    return check


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
