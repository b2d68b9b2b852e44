"""How the client commands print: tables and sentences for people, JSON for scripts,
progress bars for long runs.

Theory of operation:

- stdout carries the result and nothing else (a table, a sentence, JSON, records), so
  ``weirmq ... --json | jq`` and ``> file`` get clean data. Notes, summaries, errors and
  progress bars go to stderr.
- Colour and progress bars appear only on a terminal. rich's Console detects one (and
  honours NO_COLOR and FORCE_COLOR); we never force colour.
- Off a terminal, rich would wrap tables at 80 columns. A pipe gets a console wide enough
  for any row, so every row stays on one line, as awk and grep expect.
- JSON goes through ``json.dumps``, never rich, so no highlighting or wrapping can creep in.

rich is imported inside the functions: ``weirmq serve`` imports this package too, and its
start-up must not pay for rich.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import click

if TYPE_CHECKING:
    from rich.console import Console

# Width of a console that is not a terminal: wide enough that no table row wraps.
PIPE_WIDTH = 10_000


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"


def console(*, stderr: bool = False) -> Console:
    """A rich Console on stdout (or stderr) that wraps only on a real terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def parsed_by(
    parse: Callable[[str], Any], errors: tuple[type[Exception], ...] = (ValueError,)
) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """A click option callback: the option's text through `parse` (None stays None), and
    what `parse` raises of `errors` as click's usage error naming the option."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        try:
            return None if value is None else parse(value)
        except errors as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return callback


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
    """An aligned table without borders: a bold header row, then one line per row.

    Cells are plain text, never rich markup: names from the broker (a group id, a client
    id) may hold brackets, which markup would swallow or refuse."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in columns:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console().print(table)


def print_line(text: str) -> None:
    """One line of result on stdout (markup-free: names from the broker are printed as is)."""
    console().print(text, markup=False)


def note(text: str) -> None:
    """A message for the person at the terminal, on stderr (never mixed into the data)."""
    click.echo(f"weirmq: {text}", err=True)


def plural(count: int, noun: str) -> str:
    """``1 partition``, ``3 partitions``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def print_json(data: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(data, indent=2))


def json_line(data: Any) -> bytes:
    """One JSON object as a line of JSON Lines (compact, UTF-8, newline-terminated)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def text_or_base64(data: bytes | None) -> tuple[str | None, bool]:
    """Bytes for JSON: ``(text, False)`` when they are UTF-8, else ``(base64, True)``."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def bytes_from_json(text: str | None, is_base64: bool) -> bytes | None:
    """The inverse of ``text_or_base64`` (for scripts and tests reading our JSON back)."""
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True) if is_base64 else text.encode("utf-8")
    except binascii.Error as exc:
        raise ValueError(f"not base64: {text!r}") from exc


# -- progress ----------------------------------------------------------------------------------


def progress_wanted(*, data_on_stdout: bool = False) -> bool:
    """Whether to draw a progress bar: only on a terminal, and never over records that are
    being printed on that same terminal (stdout and stderr both a terminal)."""
    if not sys.stderr.isatty():
        return False
    return not (data_on_stdout and sys.stdout.isatty())


@contextmanager
def progress(
    description: str,
    *,
    enabled: bool,
    total: float | None = None,
    unit: Literal["records", "bytes"] = "records",
) -> Iterator[Callable[[float], None]]:
    """A transient progress bar on stderr; yields ``advance(amount)``.

    With no ``total`` the bar is a spinner with a count. Disabled, ``advance`` does nothing,
    so callers need no second code path.
    """
    if not enabled:
        yield _ignore
        return
    from rich.progress import Progress

    columns = _progress_columns(total, unit)
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)


@contextmanager
def activity(description: str, *, enabled: bool) -> Iterator[None]:
    """A transient spinner with the time elapsed, on stderr, while one long call runs
    (e.g. a request the server answers only when done). Disabled, it shows nothing."""
    if not enabled:
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()]
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        bar.add_task(description, total=None)
        yield


def _ignore(amount: float) -> None:
    del amount


def _progress_columns(total: float | None, unit: str) -> list[Any]:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    if total is None:
        count = TextColumn("{task.completed:,.0f} " + unit)
        return [SpinnerColumn(), TextColumn("{task.description}"), count, TimeElapsedColumn()]
    counter = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    return [TextColumn("{task.description}"), BarColumn(), counter, TimeElapsedColumn()]


def report_deleted(kind: str, name: str, deleted: bool, as_json: bool) -> None:
    """What a `delete --if-exists` command prints: the JSON document, or one line."""
    if as_json:
        print_json({"name": name, "deleted": deleted})
    elif deleted:
        print_line(f"Deleted {kind} {name}.")
    else:
        note(f"{kind} {name!r} does not exist")
