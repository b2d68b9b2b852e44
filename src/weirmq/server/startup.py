"""Start-up failures said in one line: which file or address, and what to do about it.

A broker that cannot start tells its operator (or supervisor) why on one line of stderr
and exits with code 1; a traceback of fifty lines through the JSON decoder says less than
"topics.json is damaged; restore it or move it away". Three things fail a start:

- a state file in the data directory that cannot be read (`open_broker`). The broker's
  own modules raise whatever their parser raised; only when that happens do we look at
  the state files ourselves (`damaged_state_file`), so a healthy start pays nothing. An
  error we cannot pin on a file is not hidden: it propagates, traceback and all, as the
  bug it probably is;
- an address that cannot be bound (`listener_error`): the message names the address and
  the setting that chose it, because with default settings a second broker on the same
  machine collides on a port its operator never typed;
- anything else that `StartupError` is raised for.

The announcement line ("accepting Kafka connections") is printed only once none of this
can happen any more (`weirmq.server.run`).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

from ..broker.core import Broker
from ..settings import Settings


class StartupError(Exception):
    """The broker cannot start; the message is one line saying what and what to do."""


def open_broker(settings: Settings) -> Broker:
    """`Broker(settings)`, with a damaged state file reported as a `StartupError`."""
    try:
        return Broker(settings)
    except Exception as exc:
        damage = damaged_state_file(settings.data_dir)
        if damage is not None:
            raise StartupError(damage) from exc
        if isinstance(exc, ValueError) and str(settings.data_dir) in str(exc):
            # The broker's own message already names the file (node.id mismatch, ...).
            raise StartupError(str(exc).splitlines()[0]) from exc
        raise


def _json_object_with(key: str) -> Callable[[bytes], None]:
    def check(data: bytes) -> None:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError(f"expected a JSON object, found {type(document).__name__}")
        if key not in document:
            raise ValueError(f"no {key!r} in it")

    return check


def _json_object(data: bytes) -> None:
    if not isinstance(json.loads(data), dict):
        raise ValueError("expected a JSON object")


def _utf8_text(data: bytes) -> None:
    data.decode()


def _number(data: bytes) -> None:
    text = data.decode().strip()
    if not text.isdigit():
        raise ValueError(f"expected a number, found {text[:40]!r}")


_RESTORE = "restore it from a backup"
STATE_FILES: tuple[tuple[str, Callable[[bytes], None], str], ...] = (
    (
        "topics.json",
        _json_object_with("topics"),
        f"{_RESTORE}, or move it away and the broker rebuilds the topic list from the "
        "partition directories (topic ids and config overrides are then lost)",
    ),
    (
        "meta.properties",
        _utf8_text,
        f"{_RESTORE}, or move it away and a new cluster id is made",
    ),
    (
        "producer-id-block",
        _number,
        f"{_RESTORE}: it must hold a number above every producer id handed out, or "
        "idempotent producers could be confused",
    ),
    (
        "group-configs.json",
        _json_object,
        f"{_RESTORE}, or move it away and the groups' config overrides are lost",
    ),
)
"""The data directory's files a start refuses to guess about: name, check, what to do.
(Checkpoints and snapshots are not here: the broker ignores a damaged one and rebuilds
what it held from the logs, with a warning.)"""


def damaged_state_file(data_dir: Path) -> str | None:
    """One line naming the first state file in `data_dir` that cannot be read, why, and
    what to do; None when they all read."""
    for name, check, advice in STATE_FILES:
        path = data_dir / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
        try:
            check(data)
        except (ValueError, UnicodeError) as exc:
            reason = "it is empty" if not data.strip() else _one_line(exc)
            return f"{path} is damaged ({reason}); {advice}"
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def listener_error(what: str, address: str, setting: str, exc: OSError) -> StartupError:
    """A bind failure of the listener for `what`, naming its address and setting."""
    flag = "--" + setting.replace("_", "-")
    env = "WEIRMQ_" + setting.upper()
    where = f"setting {setting!r}: {flag}, {env} or the config file"
    if exc.errno == errno.EADDRINUSE:
        return StartupError(
            f"the {what} address {address} is already in use (another broker on this "
            f"machine?); choose a free one with {where}"
        )
    return StartupError(f"cannot listen on {address} for the {what} ({where}): {exc}")
