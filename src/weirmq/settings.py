"""Broker settings: what they are, where they come from, and how a bad one is reported.

Theory of operation
-------------------
Every setting is one row of ``SETTING_SPECS``: its name, the kind of value it holds (which
says how to read it from text and how to check a typed value), the Kafka broker config it
stands for, its bounds and one line of meaning. ``Settings`` holds the defaults; the table
and the dataclass list the same names in the same order (asserted below). Everything else is
driven by the table: parsing, bounds, error messages, the ``WEIRMQ_<NAME>`` variable names,
and docs/configuration.md (written by hand, checked against the table by a test).

Values arrive in layers; each later layer overrides the earlier ones, key by key::

    defaults  <  TOML file  <  WEIRMQ_<NAME> environment variables  <  overrides (flags)

The file is ``config_file`` if given, else the one named by ``WEIRMQ_CONFIG``, else none.

Every value of every layer is checked, including one that a later layer overrides: a typo in
the config file is reported on the day it is made, not on the day the flag hiding it goes
away. The first problem stops loading with a ``SettingsError`` that names the setting, where
it came from and what was wrong::

    setting 'max_request_bytes' from environment variable WEIRMQ_MAX_REQUEST_BYTES:
        expected an integer, got 'abc'
    unknown setting 'max_reqest_bytes' in broker.toml (did you mean 'max_request_bytes'?)

Text and typed values are read differently on purpose. The environment holds only text, so
``"yes"``, ``"on"`` and ``"1"`` mean true. TOML has types, so ``node_id = "5"`` or
``auto_create_topics = 1`` is an error rather than a guess: the file says what it means.
Overrides are typed values (from click), but a string is read as text, as on a command line.

``Settings`` checks its own fields too (``__post_init__``), so a broker built in a test with
``Settings(node_id=-1)`` fails as loudly as one started from a bad file. The few bounds that
depend on another setting (``amqp_frame_max_bytes`` at most ``max_request_bytes``) are
checked there too, once every layer is merged, since only then are both values known.

Some values are secret (``amqp_users`` holds passwords, ``sqs_access_keys`` secret keys).
Their kind says what of them may be shown (``ValueKind.public``: the admin API's settings
document shows user names and access key ids only), their field is left out of
``repr(settings)``, and an error about one never quotes it.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "WEIRMQ_"
CONFIG_FILE_ENV_VAR = "WEIRMQ_CONFIG"
"""Names the TOML file when ``load_settings`` is given none; not a setting itself."""
BOOTSTRAP_ENV_VAR = "WEIRMQ_BOOTSTRAP"
"""The broker the client commands (``weirmq topics``, ``produce``, ...) talk to; a user
exports it once for a shell that also starts brokers, so it is not a broker setting."""
NOT_SETTINGS_ENV_VARS = frozenset({CONFIG_FILE_ENV_VAR, BOOTSTRAP_ENV_VAR})

# Bounds. Sizes and ids that travel in Kafka's int32 fields, and counts, stop at INT32_MAX;
# durations and retention are Kafka longs.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
PORT_MAX = 65535
PARTITIONS_PER_TOPIC_MAX = 100_000
"""Partitions of one topic at most (`broker.core.PARTITIONS_MAX` is this)."""
UINT16_MAX = 65535
"""AMQP's short fields (channel_max, heartbeat in Connection.Tune)."""
AMQP_FRAME_MIN_BYTES = 4096
"""AMQP 0-9-1's frame-min-size: no peer may be asked to take smaller frames."""
AMQP_FRAME_MAX_BYTES_MAX = 2**32 - 1
"""frame_max travels in a 32-bit unsigned field of Connection.Tune."""
AMQP_MESSAGE_BYTES_MAX = 512 * 1024 * 1024
"""RabbitMQ refuses a max_message_size above 512 MiB: a message is held whole in memory
while it is routed, so larger ones belong in a log (a Kafka topic) or in object storage."""
SQS_MESSAGE_BYTES_MAX = 1024 * 1024
"""SQS's own ceiling on a message (body and attributes), 1 MiB since August 2025; a queue's
MaximumMessageSize is 1024 bytes to this."""
SQS_MESSAGE_BYTES_MIN = 1024
"""The smallest MaximumMessageSize SQS lets a queue have."""
SQS_REQUEST_BYTES_MIN = SQS_MESSAGE_BYTES_MAX + 64 * 1024
"""An SQS request body must be able to hold the largest batch SQS allows (ten messages of
1 MiB in all) plus its envelope (action, queue URL, entry ids, attribute names)."""
SQS_REGION_CHARS_MAX = 64
"""AWS's region names are about fifteen characters; the region goes into every queue ARN."""
# Longer values are cut in error messages: a whole TOML table would drown the point.
SHOWN_VALUE_CHARS_MAX = 80


class SettingsError(ValueError):
    """A setting is unknown or unusable; the message names it and where it came from."""


class _InvalidValue(Exception):
    """Why a value is unusable, raised before it is known which setting and source it is for."""


def _show(value: object) -> str:
    shown = repr(value)
    if len(shown) <= SHOWN_VALUE_CHARS_MAX:
        return shown
    return shown[: SHOWN_VALUE_CHARS_MAX - 3] + "..."


# --- Kinds of value -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValueKind:
    """How one kind of setting is read from text and how a typed value of it is checked."""

    from_text: Callable[[str], object]
    from_value: Callable[[object], object]
    public: Callable[[object], object] | None = None
    """What of a checked value may be shown (the admin API's settings document); None:
    all of it. A kind holding secrets shows only their names."""


# Underscores as in TOML and Python (104_857_600); no spaces, no unit suffixes, no floats.
_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")


def _int_from_text(text: str) -> int:
    if _INT_TEXT.fullmatch(text) is None:
        raise _InvalidValue(f"expected an integer, got {_show(text)}")
    return int(text)


def _int_from_value(value: object) -> int:
    # bool is an int to Python, but `node_id = true` is a slip, not the number 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _InvalidValue(f"expected an integer, got {_show(value)}")
    return value


_BOOL_WORDS = {
    "true": True, "1": True, "yes": True, "on": True,
    "false": False, "0": False, "no": False, "off": False,
}  # fmt: skip


def _bool_from_text(text: str) -> bool:
    word = _BOOL_WORDS.get(text.lower())
    if word is None:
        expected = "expected a boolean (true/false, yes/no, on/off, 1/0)"
        raise _InvalidValue(f"{expected}, got {_show(text)}")
    return word


def _bool_from_value(value: object) -> bool:
    if not isinstance(value, bool):
        raise _InvalidValue(f"expected a boolean (true or false), got {_show(value)}")
    return value


def _path_from_text(text: str) -> Path:
    # Path("") is the working directory: an empty value is far more likely a mistake.
    if not text:
        raise _InvalidValue("expected a directory path, got ''")
    return Path(text)


def _path_from_value(value: object) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        return _path_from_text(value)
    raise _InvalidValue(f"expected a directory path, got {_show(value)}")


def _listen_from_text(text: str) -> str:
    _split_host_port(text)
    return text


def _listen_from_value(value: object) -> str:
    if not isinstance(value, str):
        raise _InvalidValue(f"expected a HOST:PORT string, got {_show(value)}")
    return _listen_from_text(value)


def _advertise_from_text(text: str) -> str | None:
    # TOML has no null, so an empty string is how a file, variable or flag says "unset".
    if not text:
        return None
    _, port = _split_host_port(text)
    if port == 0:
        raise _InvalidValue(f"cannot advertise port 0, clients need a real port; got {_show(text)}")
    return text


def _advertise_from_value(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _InvalidValue(f"expected a HOST:PORT string, got {_show(value)}")
    return _advertise_from_text(value)


def _optional_listen_from_text(text: str) -> str | None:
    # "" or "off" turns the listener off (TOML has no null).
    if text in ("", "off"):
        return None
    return _listen_from_text(text)


def _optional_listen_from_value(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _InvalidValue(f"expected a HOST:PORT string or 'off', got {_show(value)}")
    return _optional_listen_from_text(value)


# One allowed name of the admin API: a host name or IPv4 address, or an IPv6 address in
# brackets, optionally with a port; compared with the Host header, so no scheme, no path.
_ALLOWED_HOST = re.compile(r"(?:[a-z0-9_-]+(?:\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?")


def _allowed_hosts_from_text(text: str) -> tuple[str, ...]:
    # A comma list ("admin.example, 10.0.0.5:9644"); empty means none.
    return _allowed_hosts_from_value([item.strip() for item in text.split(",") if item.strip()])


def _allowed_hosts_from_value(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return _allowed_hosts_from_text(value)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _InvalidValue(f"expected a list of HOST or HOST:PORT names, got {_show(value)}")
    hosts = tuple(item.lower() for item in value)
    for host in hosts:
        port = host.rpartition("]")[2].partition(":")[2]
        if _ALLOWED_HOST.fullmatch(host) is None or (port and int(port) > PORT_MAX):
            raise _InvalidValue(
                f"expected HOST or HOST:PORT (an IPv6 address in brackets; no scheme, no "
                f"path), got {_show(host)}"
            )
    return hosts


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _names_from_text(text: str) -> tuple[str, ...]:
    # A comma list ("guest, monitoring"); empty means none.
    return _names_from_value(_comma_list(text))


def _names_from_value(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return _names_from_text(value)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _InvalidValue(f"expected a list of names, got {_show(value)}")
    names = tuple(value)
    if any(not name for name in names):
        raise _InvalidValue(f"a name cannot be empty, got {_show(value)}")
    if len(set(names)) != len(names):
        raise _InvalidValue(f"a name is listed twice in {_show(value)}")
    return names


def _vhosts_from_text(text: str) -> tuple[str, ...]:
    return _vhosts_from_value(_comma_list(text))


def _vhosts_from_value(value: object) -> tuple[str, ...]:
    # Without a virtual host no client could finish its handshake: surely a mistake.
    names = _names_from_value(value)
    if not names:
        raise _InvalidValue("expected at least one virtual host, such as '/'")
    return names


# Names with their secrets: the AMQP listener's users and passwords, the SQS API's access
# keys. Both are written alike: NAME:SECRET pairs, as a comma list, a list of such strings
# or a TOML table. A secret is never put in a message: a malformed entry is named by its
# position (and its name, once that is known).


@dataclass(frozen=True, slots=True)
class _SecretPairs:
    """One kind of (name, secret) pairs: how its errors call things, what a name may be."""

    entry: str
    """How an entry is written: "USER:PASSWORD"."""
    name: str
    """What the first part is called: "user"."""
    empty_name: str
    """An empty first part, in "entry 2 has an empty ...": "user name"."""
    secret: str
    """What the second part is called: "password"."""
    name_pattern: re.Pattern[str] | None = None
    """What a name must match in full; None: any text but the empty one."""
    name_rule: str = ""
    """``name_pattern`` in words, for its error."""

    def from_text(self, text: str) -> tuple[tuple[str, str], ...]:
        # A comma list ("guest:guest, app:s3cret"), each entry split at its first colon;
        # empty means none. A secret holding a comma goes in the TOML file.
        entries = enumerate(_comma_list(text), start=1)
        return self.checked([self._split(number, entry) for number, entry in entries])

    def from_value(self, value: object) -> tuple[tuple[str, str], ...]:
        if isinstance(value, str):
            return self.from_text(value)
        if isinstance(value, Mapping):  # a TOML table: { guest = "guest", app = "s3cret" }
            items: list[object] = [(name, secret) for name, secret in value.items()]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise _InvalidValue(
                f"expected {self.entry} pairs (a comma list, a list or a table), "
                f"got a {type(value).__name__}"
            )
        pairs = []
        for number, item in enumerate(items, start=1):
            if isinstance(item, str):
                pairs.append(self._split(number, item))
            elif (
                isinstance(item, tuple | list)
                and len(item) == 2
                and all(isinstance(part, str) for part in item)
            ):
                pairs.append((item[0], item[1]))
            else:
                raise _InvalidValue(f"entry {number} is not {self.entry}")
        return self.checked(pairs)

    def _split(self, number: int, entry: str) -> tuple[str, str]:
        name, colon, secret = entry.partition(":")
        if not colon:
            raise _InvalidValue(f"entry {number} is not {self.entry} (no ':' in it)")
        return name, secret

    def checked(self, pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        seen: set[str] = set()
        for number, (name, secret) in enumerate(pairs, start=1):
            if not name:
                raise _InvalidValue(f"entry {number} has an empty {self.empty_name}")
            if self.name_pattern is not None and self.name_pattern.fullmatch(name) is None:
                raise _InvalidValue(f"{self.name} {_show(name)} {self.name_rule}")
            # Everybody knows an empty secret: PLAIN and AMQPLAIN would let anyone in as
            # this user, and anyone could sign requests with this key.
            if not secret:
                raise _InvalidValue(f"{self.name} {_show(name)} has an empty {self.secret}")
            if name in seen:
                raise _InvalidValue(f"{self.name} {_show(name)} is listed twice")
            seen.add(name)
        return tuple(pairs)

    def kind(self) -> ValueKind:
        """The setting kind; what of it may be shown is the names, never the secrets."""
        return ValueKind(self.from_text, self.from_value, public=_pair_names)


def _pair_names(value: object) -> object:
    assert isinstance(value, tuple)
    return [name for name, _secret in value]


# AWS's own pattern for an AccessKeyId ([\w]+). It also keeps the key id apart in SigV4's
# "Credential=KEYID/DATE/REGION/sqs/aws4_request" and in the KEYID:SECRET syntax above.
_ACCESS_KEY_ID = re.compile(r"[A-Za-z0-9_]+")
_AMQP_USERS = _SecretPairs("USER:PASSWORD", "user", "user name", "password")
_SQS_ACCESS_KEYS = _SecretPairs(
    "ACCESS_KEY_ID:SECRET_KEY", "access key id", "access key id", "secret key",
    name_pattern=_ACCESS_KEY_ID, name_rule="may hold only letters, digits and '_' (as AWS's)",
)  # fmt: skip


def _token_kind(pattern: re.Pattern[str], expected: str) -> ValueKind:
    """A kind of text that must match `pattern` in full (described as `expected`). A TOML
    number is refused, not converted: an account id like 000000000001 would lose its zeros."""

    def from_text(text: str) -> str:
        if pattern.fullmatch(text) is None:
            raise _InvalidValue(f"expected {expected}, got {_show(text)}")
        return text

    def from_value(value: object) -> str:
        if not isinstance(value, str):
            raise _InvalidValue(f"expected {expected}, as a string, got {_show(value)}")
        return from_text(value)

    return ValueKind(from_text, from_value)


INTEGER = ValueKind(_int_from_text, _int_from_value)
BOOLEAN = ValueKind(_bool_from_text, _bool_from_value)
DIRECTORY = ValueKind(_path_from_text, _path_from_value)
LISTEN_ADDRESS = ValueKind(_listen_from_text, _listen_from_value)
ADVERTISED_ADDRESS = ValueKind(_advertise_from_text, _advertise_from_value)
OPTIONAL_LISTEN_ADDRESS = ValueKind(_optional_listen_from_text, _optional_listen_from_value)
ALLOWED_HOSTS = ValueKind(_allowed_hosts_from_text, _allowed_hosts_from_value)
NAMES = ValueKind(_names_from_text, _names_from_value)
VHOSTS = ValueKind(_vhosts_from_text, _vhosts_from_value)
USERS = _AMQP_USERS.kind()
ACCESS_KEYS = _SQS_ACCESS_KEYS.kind()
SQS_REGION = _token_kind(
    re.compile(rf"[A-Za-z0-9-]{{1,{SQS_REGION_CHARS_MAX}}}"),
    f"a region name of letters, digits and '-' (at most {SQS_REGION_CHARS_MAX}), "
    "such as 'us-east-1'",
)
SQS_ACCOUNT_ID = _token_kind(re.compile(r"[0-9]{12}"), "an AWS account id of 12 decimal digits")

ADMIN_TOKEN_CHARS_MIN = 16
"""A shorter token could be guessed; the one the broker makes has 43 characters."""
ADMIN_TOKEN_CHARS_MAX = 256
"""It travels in every changing request's Authorization header."""
# RFC 6750's b64token: what an Authorization: Bearer header carries as it is.
_ADMIN_TOKEN_TEXT = re.compile(
    rf"[A-Za-z0-9\-._~+/]{{{ADMIN_TOKEN_CHARS_MIN},{ADMIN_TOKEN_CHARS_MAX}}}=*"
)


def _admin_token_from_text(text: str) -> str | None:
    """Never quoted in an error: it is a secret (its length is said instead)."""
    if text == "":
        return None
    if _ADMIN_TOKEN_TEXT.fullmatch(text) is None:
        raise _InvalidValue(
            f"expected {ADMIN_TOKEN_CHARS_MIN} to {ADMIN_TOKEN_CHARS_MAX} characters of "
            f"[A-Za-z0-9-._~+/] (a bearer token), got {len(text)} characters (not shown)"
        )
    return text


def _admin_token_from_value(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _InvalidValue(f"expected a string, got a {type(value).__name__} (not shown)")
    return _admin_token_from_text(value)


def _admin_token_public(value: object) -> object:
    return None if value is None else "(set)"


ADMIN_TOKEN = ValueKind(_admin_token_from_text, _admin_token_from_value, public=_admin_token_public)


def _flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


# --- The table ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One setting: its kind, its Kafka counterpart (None when Kafka has none) and bounds.

    ``minimum`` and ``maximum`` apply to integers only and are inclusive.
    """

    name: str
    kind: ValueKind
    kafka_name: str | None
    meaning: str
    minimum: int | None = None
    maximum: int | None = None

    @property
    def env_var(self) -> str:
        """The environment variable that sets it: ``WEIRMQ_`` and the upper-case name."""
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        """How error messages name the command-line flag that sets it."""
        return _flag_of(self.name)

    def from_text(self, text: str) -> object:
        """The value that ``text`` means, checked against the bounds."""
        return self._bounded(self.kind.from_text(text))

    def from_value(self, value: object) -> object:
        """``value`` checked for type and bounds (a ``str`` path becomes a ``Path``)."""
        return self._bounded(self.kind.from_value(value))

    def _bounded(self, value: object) -> object:
        if not isinstance(value, int):  # bools are ints, but no boolean setting has bounds
            return value
        if self.minimum is not None and value < self.minimum:
            raise _InvalidValue(f"must be at least {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise _InvalidValue(f"must be at most {self.maximum}, got {value}")
        return value


# fmt: off
# Kept as rows, not one argument per line: it is read as a table.
SETTING_SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "listen", LISTEN_ADDRESS, "listeners",
        "HOST:PORT of the Kafka listener; port 0 picks a free port",
    ),
    SettingSpec(
        "advertise", ADVERTISED_ADDRESS, "advertised.listeners",
        "HOST:PORT given to clients in Metadata; unset means the address actually bound",
    ),
    SettingSpec("data_dir", DIRECTORY, "log.dirs", "directory holding the partition logs"),
    SettingSpec(
        "node_id", INTEGER, "node.id", "this broker's id in Metadata",
        minimum=0, maximum=INT32_MAX,
    ),
    SettingSpec(
        "max_request_bytes", INTEGER, "socket.request.max.bytes",
        "largest request accepted; a bigger one closes the connection",
        minimum=1024, maximum=INT32_MAX,
    ),
    SettingSpec(
        "max_in_flight_requests", INTEGER, None,
        "requests read ahead of their responses per connection; reading pauses at this many",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "idle_timeout_ms", INTEGER, "connections.max.idle.ms",
        "a connection with no traffic for this long is closed",
        minimum=1, maximum=INT64_MAX,
    ),
    # Connection and memory bounds of the connection pump (issue 20), kept together.
    SettingSpec(
        "disk_free_min_bytes", INTEGER, None,
        "below this much free space on the data directory's file system publishes are "
        "refused (KAFKA_STORAGE_ERROR), and producers are slowed from twice it",
        minimum=0, maximum=INT64_MAX,
    ),
    SettingSpec(
        "queued_max_request_bytes", INTEGER, "queued.max.request.bytes",
        "bytes all connections together may hold in large requests being received or in "
        "flight; beyond it connections stop reading",
        minimum=1024, maximum=INT64_MAX,
    ),
    SettingSpec(
        "max_connections", INTEGER, "max.connections",
        "client connections open at most; one more is accepted and closed at once",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "max_connections_per_address", INTEGER, "max.connections.per.ip",
        "client connections open at most from one client address",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "auto_create_topics", BOOLEAN, "auto.create.topics.enable",
        "create a topic when a client asks for one that does not exist",
    ),
    SettingSpec(
        "default_partitions", INTEGER, "num.partitions",
        "partitions of an auto-created topic",
        minimum=1, maximum=INT32_MAX,
    ),
    # Bounds of topic creation (issue 20), kept together: see broker/topics.py.
    SettingSpec(
        "max_partitions_per_request", INTEGER, None,
        "partitions one CreateTopics or CreatePartitions request may create in all; a "
        "request asking more is refused whole (POLICY_VIOLATION), as Kafka 4 does",
        minimum=1, maximum=PARTITIONS_PER_TOPIC_MAX,
    ),
    SettingSpec(
        "max_broker_partitions", INTEGER, None,
        "partitions this broker holds at most; a creation past it is refused "
        "(POLICY_VIOLATION, or UNKNOWN_TOPIC_OR_PARTITION for an auto-creation)",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "controller_mutation_rate", INTEGER, None,
        "partitions one client id may create or delete per second (Kafka's KIP-599 quota, "
        "for every client); past it, THROTTLING_QUOTA_EXCEEDED; 0: no quota",
        minimum=0, maximum=INT32_MAX,
    ),
    SettingSpec(
        "auto_create_topics_rate", INTEGER, None,
        "topics one client id may have auto-created per second; past it, "
        "THROTTLING_QUOTA_EXCEEDED; 0: no limit",
        minimum=0, maximum=INT32_MAX,
    ),
    SettingSpec(
        "message_max_bytes", INTEGER, "message.max.bytes",
        "largest record batch accepted",
        minimum=64, maximum=INT32_MAX,
    ),
    SettingSpec(
        "segment_bytes", INTEGER, "log.segment.bytes",
        "a segment file is rolled before it grows past this",
        minimum=1024, maximum=INT32_MAX,
    ),
    SettingSpec(
        "retention_ms", INTEGER, "log.retention.ms",
        "segments older than this are deleted; -1 keeps them forever",
        minimum=-1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "retention_bytes", INTEGER, "log.retention.bytes",
        "oldest segments are deleted while a partition is larger; -1 means no limit",
        minimum=-1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "flush_interval_ms", INTEGER, "log.flush.interval.ms",
        "how often data acknowledged with acks=0 or acks=1 is fsynced",
        minimum=1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "housekeeping_interval_ms", INTEGER, "log.retention.check.interval.ms",
        "how often retention is applied",
        minimum=1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "handles_max", INTEGER, None,
        "segment files kept open at most; the least recently used are closed",
        minimum=8, maximum=INT32_MAX,
    ),
    # The log cleaner (compaction, storage/cleaner.py), kept together.
    SettingSpec(
        "log_cleaner_enable", BOOLEAN, "log.cleaner.enable",
        "run the log cleaner; off, compacted topics are never compacted",
    ),
    SettingSpec(
        "log_cleaner_io_max_bytes_per_second", INTEGER, "log.cleaner.io.max.bytes.per.second",
        "bytes the log cleaner reads and writes per second, together",
        minimum=1024, maximum=INT64_MAX,
    ),
    SettingSpec(
        "log_cleaner_dedupe_buffer_size", INTEGER, "log.cleaner.dedupe.buffer.size",
        "bytes of the log cleaner's key map, 16 per key: keys one cleaning can dedupe",
        minimum=1024, maximum=INT32_MAX,
    ),
    SettingSpec(
        "log_cleaner_backoff_ms", INTEGER, "log.cleaner.backoff.ms",
        "how long the log cleaner sleeps when no log needs cleaning",
        minimum=1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "producer_id_expiration_ms", INTEGER, "producer.id.expiration.ms",
        "a producer id idle for this long is forgotten",
        minimum=1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "transaction_max_timeout_ms", INTEGER, "transaction.max.timeout.ms",
        "longest transaction timeout a transactional producer may ask for",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "transactional_id_expiration_ms", INTEGER, "transactional.id.expiration.ms",
        "a transactional id with no transaction open, idle for this long, is forgotten",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", INTEGER,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "how often transactions open past their timeout are looked for and aborted",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "max_transactional_ids", INTEGER, None,
        "transactional ids known at most; a new one past it is refused (retriable) until "
        "idle ones expire",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "shutdown_timeout_ms", INTEGER, None,
        "on stop, how long in-flight requests get to finish",
        minimum=0, maximum=INT64_MAX,
    ),
    SettingSpec(
        "group_min_session_timeout_ms", INTEGER, "group.min.session.timeout.ms",
        "shortest session timeout a classic group member may ask for",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_max_session_timeout_ms", INTEGER, "group.max.session.timeout.ms",
        "longest session timeout a classic group member may ask for",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_initial_rebalance_delay_ms", INTEGER, "group.initial.rebalance.delay.ms",
        "how long the first rebalance of an empty classic group waits for more members",
        minimum=0, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_max_size", INTEGER, "group.max.size",
        "members of one group at most",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_session_timeout_ms", INTEGER, "group.consumer.session.timeout.ms",
        "a consumer-protocol (KIP-848) member silent this long is removed",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_heartbeat_interval_ms", INTEGER, "group.consumer.heartbeat.interval.ms",
        "how often consumer-protocol (KIP-848) members are told to heartbeat",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_session_timeout_ms", INTEGER, "group.share.session.timeout.ms",
        "a share group member silent this long is removed and its records released",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_heartbeat_interval_ms", INTEGER, "group.share.heartbeat.interval.ms",
        "how often share group members are told to heartbeat",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_record_lock_duration_ms", INTEGER, "group.share.record.lock.duration.ms",
        "how long a record delivered to a share group member stays locked to it",
        minimum=1, maximum=3_600_000,
    ),
    SettingSpec(
        "group_share_delivery_count_limit", INTEGER, "group.share.delivery.count.limit",
        "deliveries of one record to a share group before it is archived (dead-lettered)",
        minimum=1, maximum=25,
    ),
    SettingSpec(
        "group_share_partition_max_record_locks", INTEGER,
        "group.share.partition.max.record.locks",
        "records in flight per share-partition at most (its window of locks)",
        minimum=1, maximum=10_000,
    ),
    SettingSpec(
        "group_consumer_min_session_timeout_ms", INTEGER,
        "group.consumer.min.session.timeout.ms",
        "shortest consumer.session.timeout.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_max_session_timeout_ms", INTEGER,
        "group.consumer.max.session.timeout.ms",
        "longest consumer.session.timeout.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_min_heartbeat_interval_ms", INTEGER,
        "group.consumer.min.heartbeat.interval.ms",
        "shortest consumer.heartbeat.interval.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_max_heartbeat_interval_ms", INTEGER,
        "group.consumer.max.heartbeat.interval.ms",
        "longest consumer.heartbeat.interval.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_consumer_migration_policy",
        _token_kind(
            re.compile(r"(?i)bidirectional|upgrade|downgrade|disabled"),
            "one of BIDIRECTIONAL, UPGRADE, DOWNGRADE, DISABLED",
        ),
        "group.consumer.migration.policy",
        "which online conversions between classic and consumer (KIP-848) groups are allowed",
    ),
    SettingSpec(
        "group_share_min_session_timeout_ms", INTEGER,
        "group.share.min.session.timeout.ms",
        "shortest share.session.timeout.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_max_session_timeout_ms", INTEGER,
        "group.share.max.session.timeout.ms",
        "longest share.session.timeout.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_min_heartbeat_interval_ms", INTEGER,
        "group.share.min.heartbeat.interval.ms",
        "shortest share.heartbeat.interval.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_max_heartbeat_interval_ms", INTEGER,
        "group.share.max.heartbeat.interval.ms",
        "longest share.heartbeat.interval.ms a group config may set",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "group_share_min_record_lock_duration_ms", INTEGER,
        "group.share.min.record.lock.duration.ms",
        "shortest share.record.lock.duration.ms a group config may set",
        minimum=1, maximum=3_600_000,
    ),
    SettingSpec(
        "group_share_max_record_lock_duration_ms", INTEGER,
        "group.share.max.record.lock.duration.ms",
        "longest share.record.lock.duration.ms a group config may set",
        minimum=1, maximum=3_600_000,
    ),
    SettingSpec(
        "group_share_min_delivery_count_limit", INTEGER,
        "group.share.min.delivery.count.limit",
        "smallest share.delivery.count.limit a group config may set",
        minimum=1, maximum=25,
    ),
    SettingSpec(
        "group_share_max_delivery_count_limit", INTEGER,
        "group.share.max.delivery.count.limit",
        "largest share.delivery.count.limit a group config may set",
        minimum=1, maximum=25,
    ),
    SettingSpec(
        "offsets_retention_minutes", INTEGER, "offsets.retention.minutes",
        "committed offsets of an empty group are deleted after this long",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "admin_listen", OPTIONAL_LISTEN_ADDRESS, None,
        "HOST:PORT of the HTTP admin API and /metrics; 'off' (or empty) disables it",
    ),
    SettingSpec(
        "admin_allowed_hosts", ALLOWED_HOSTS, None,
        "names the admin API answers to besides its own address (Host header), comma-separated",
    ),
    SettingSpec(
        "admin_token", ADMIN_TOKEN, None,
        "bearer token the admin API asks of changes (and of every request off loopback); "
        "unset: made at start and kept in DATA_DIR/admin-token",
    ),
    # The AMQP 0-9-1 listener (issue 21), kept together; RabbitMQ's defaults.
    SettingSpec(
        "amqp_listen", OPTIONAL_LISTEN_ADDRESS, None,
        "HOST:PORT of the AMQP 0-9-1 listener; port 0 picks a free port; 'off' (or empty) "
        "disables it",
    ),
    SettingSpec(
        "amqp_users", USERS, None,
        "USER:PASSWORD pairs AMQP clients may log in as (PLAIN, AMQPLAIN), comma-separated",
    ),
    SettingSpec(
        "amqp_loopback_users", NAMES, None,
        "AMQP users who may connect only from a loopback address, comma-separated",
    ),
    SettingSpec(
        "amqp_vhosts", VHOSTS, None,
        "virtual hosts AMQP clients may open, comma-separated; at least one",
    ),
    SettingSpec(
        "amqp_channel_max", INTEGER, None,
        "channels one AMQP connection may open at most (offered in Connection.Tune)",
        minimum=1, maximum=UINT16_MAX,
    ),
    SettingSpec(
        "amqp_frame_max_bytes", INTEGER, None,
        "largest AMQP frame offered in Connection.Tune; at most max_request_bytes",
        minimum=AMQP_FRAME_MIN_BYTES, maximum=AMQP_FRAME_MAX_BYTES_MAX,
    ),
    SettingSpec(
        "amqp_heartbeat_s", INTEGER, None,
        "AMQP heartbeat interval offered in Connection.Tune; the client decides; 0: none",
        minimum=0, maximum=UINT16_MAX,
    ),
    SettingSpec(
        "amqp_handshake_timeout_ms", INTEGER, None,
        "an AMQP connection must finish its handshake (up to Connection.Open) within this",
        minimum=1, maximum=INT64_MAX,
    ),
    SettingSpec(
        "amqp_message_bytes_max", INTEGER, None,
        "largest AMQP message body; a larger publish is refused (406) before it is buffered",
        minimum=1, maximum=AMQP_MESSAGE_BYTES_MAX,
    ),
    SettingSpec(
        "amqp_idle_timeout_ms", INTEGER, None,
        "an AMQP connection with no traffic for this long is closed; 0: never (heartbeats "
        "find dead peers)",
        minimum=0, maximum=INT64_MAX,
    ),
    # The SQS API (HTTP, what AWS SDKs speak), kept together; SQS's own limits.
    SettingSpec(
        "sqs_listen", OPTIONAL_LISTEN_ADDRESS, None,
        "HOST:PORT of the SQS API (HTTP); port 0 picks a free port; 'off' (or empty) "
        "disables it",
    ),
    SettingSpec(
        "sqs_region", SQS_REGION, None,
        "the region named in queue ARNs (arn:aws:sqs:REGION:ACCOUNT:QUEUE)",
    ),
    SettingSpec(
        "sqs_account_id", SQS_ACCOUNT_ID, None,
        "the 12-digit account in queue URLs and ARNs",
    ),
    SettingSpec(
        "sqs_access_keys", ACCESS_KEYS, None,
        "ACCESS_KEY_ID:SECRET_KEY pairs requests must be SigV4-signed with, comma-separated; "
        "empty: signatures are not checked",
    ),
    SettingSpec(
        "sqs_connections_max", INTEGER, None,
        "HTTP connections to the SQS API open at most; one more is accepted and closed at once",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "sqs_request_bytes_max", INTEGER, None,
        "largest SQS request body; a larger one is refused (413 RequestEntityTooLarge) "
        "without being held",
        minimum=SQS_REQUEST_BYTES_MIN, maximum=INT32_MAX,
    ),
    SettingSpec(
        "sqs_long_polls_max", INTEGER, None,
        "ReceiveMessage calls waiting for messages at once; one more does not wait: it "
        "answers at once with what is there, as with WaitTimeSeconds=0",
        minimum=1, maximum=INT32_MAX,
    ),
    SettingSpec(
        "sqs_message_bytes_max", INTEGER, None,
        "largest SQS message (body and attributes); a larger one is refused "
        "(InvalidParameterValue); a queue's smaller MaximumMessageSize applies first",
        minimum=SQS_MESSAGE_BYTES_MIN, maximum=SQS_MESSAGE_BYTES_MAX,
    ),
    SettingSpec(
        "sqs_idle_timeout_ms", INTEGER, None,
        "an SQS HTTP connection idle between requests for this long is closed",
        minimum=1, maximum=INT64_MAX,
    ),
)
# fmt: on

SPECS_BY_NAME: Mapping[str, SettingSpec] = {spec.name: spec for spec in SETTING_SPECS}
_SPECS_BY_ENV_VAR: Mapping[str, SettingSpec] = {spec.env_var: spec for spec in SETTING_SPECS}


# --- The settings ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a broker is configured with. Build it with ``load_settings``.

    Each field is one row of ``SETTING_SPECS``, which holds its bounds and Kafka name.
    """

    listen: str = "127.0.0.1:9092"
    """HOST:PORT of the Kafka listener; port 0 picks a free port."""
    advertise: str | None = None
    """HOST:PORT given to clients in Metadata; None means the listen address as bound."""
    data_dir: Path = Path("./weirmq-data")
    """Directory of the partition logs; a relative path is relative to the working directory."""
    node_id: int = 0
    """node.id."""
    max_request_bytes: int = 104857600
    """socket.request.max.bytes."""
    max_in_flight_requests: int = 64
    """Per connection; reading pauses at this many requests without a response."""
    idle_timeout_ms: int = 600000
    """connections.max.idle.ms."""
    # Connection and memory bounds of the connection pump (issue 20), kept together.
    disk_free_min_bytes: int = 100 * 1024 * 1024
    """Publishes are refused below this much free disk (broker/resources.py)."""
    queued_max_request_bytes: int = 256 * 1024 * 1024
    """queued.max.request.bytes: large requests being received or in flight, all
    connections together."""
    max_connections: int = 10000
    """max.connections."""
    max_connections_per_address: int = 1000
    """max.connections.per.ip."""
    auto_create_topics: bool = True
    """auto.create.topics.enable."""
    default_partitions: int = 1
    """num.partitions."""
    # Bounds of topic creation (issue 20), kept together.
    max_partitions_per_request: int = 10_000
    """Kafka 4's fixed limit (KAFKA-17870): one request makes at most this many."""
    max_broker_partitions: int = 100_000
    """Each partition costs ~3 KiB of memory and ~0.15 ms of start-up when idle."""
    controller_mutation_rate: int = 0
    """KIP-599's controller_mutation_rate, applied to every client id; 0: none (Kafka's
    default)."""
    auto_create_topics_rate: int = 10
    """Per client id, with bursts of 11 seconds' worth (110 topics), as Kafka's quotas."""
    message_max_bytes: int = 1048588
    """message.max.bytes: the largest record batch."""
    segment_bytes: int = 1073741824
    """log.segment.bytes."""
    retention_ms: int = 604800000
    """log.retention.ms; -1 is unlimited."""
    retention_bytes: int = -1
    """log.retention.bytes; -1 is unlimited."""
    flush_interval_ms: int = 1000
    """How often data acknowledged with acks=0 or acks=1 is fsynced."""
    housekeeping_interval_ms: int = 300000
    """log.retention.check.interval.ms."""
    handles_max: int = 256
    """Segment files open at most."""
    # The log cleaner (compaction, storage/cleaner.py), kept together.
    log_cleaner_enable: bool = True
    """log.cleaner.enable."""
    log_cleaner_io_max_bytes_per_second: int = 64 * 1024 * 1024
    """log.cleaner.io.max.bytes.per.second; Kafka's default is unbounded, but a cleaner at
    full speed competes with fsyncs and fetches for the one disk."""
    log_cleaner_dedupe_buffer_size: int = 8_000_000
    """log.cleaner.dedupe.buffer.size: 500,000 keys of 16 bytes (CPython's dict costs ~100
    bytes per key, so ~50 MB); Kafka's 128 MiB would be ~840 MB here."""
    log_cleaner_backoff_ms: int = 15_000
    """log.cleaner.backoff.ms."""
    producer_id_expiration_ms: int = 86400000
    """producer.id.expiration.ms."""
    transaction_max_timeout_ms: int = 900000
    """transaction.max.timeout.ms (15 minutes)."""
    transactional_id_expiration_ms: int = 604800000
    """transactional.id.expiration.ms (7 days)."""
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    """transaction.abort.timed.out.transaction.cleanup.interval.ms."""
    max_transactional_ids: int = 100000
    """Transactional ids known at most."""
    shutdown_timeout_ms: int = 4000
    """How long in-flight requests get to finish on a graceful stop."""
    group_min_session_timeout_ms: int = 6000
    """group.min.session.timeout.ms."""
    group_max_session_timeout_ms: int = 1800000
    """group.max.session.timeout.ms."""
    group_initial_rebalance_delay_ms: int = 3000
    """group.initial.rebalance.delay.ms."""
    group_max_size: int = 2147483647
    """group.max.size."""
    group_consumer_session_timeout_ms: int = 45000
    """group.consumer.session.timeout.ms."""
    group_consumer_heartbeat_interval_ms: int = 5000
    """group.consumer.heartbeat.interval.ms."""
    group_share_session_timeout_ms: int = 45000
    """group.share.session.timeout.ms."""
    group_share_heartbeat_interval_ms: int = 5000
    """group.share.heartbeat.interval.ms."""
    group_share_record_lock_duration_ms: int = 30000
    """group.share.record.lock.duration.ms."""
    group_share_delivery_count_limit: int = 5
    """group.share.delivery.count.limit."""
    group_share_partition_max_record_locks: int = 2000
    """group.share.partition.max.record.locks."""
    group_consumer_min_session_timeout_ms: int = 45000
    """group.consumer.min.session.timeout.ms."""
    group_consumer_max_session_timeout_ms: int = 60000
    """group.consumer.max.session.timeout.ms."""
    group_consumer_min_heartbeat_interval_ms: int = 5000
    """group.consumer.min.heartbeat.interval.ms."""
    group_consumer_max_heartbeat_interval_ms: int = 15000
    """group.consumer.max.heartbeat.interval.ms."""
    group_consumer_migration_policy: str = "BIDIRECTIONAL"
    """group.consumer.migration.policy: BIDIRECTIONAL, UPGRADE, DOWNGRADE or DISABLED."""
    group_share_min_session_timeout_ms: int = 45000
    """group.share.min.session.timeout.ms."""
    group_share_max_session_timeout_ms: int = 60000
    """group.share.max.session.timeout.ms."""
    group_share_min_heartbeat_interval_ms: int = 5000
    """group.share.min.heartbeat.interval.ms."""
    group_share_max_heartbeat_interval_ms: int = 15000
    """group.share.max.heartbeat.interval.ms."""
    group_share_min_record_lock_duration_ms: int = 15000
    """group.share.min.record.lock.duration.ms."""
    group_share_max_record_lock_duration_ms: int = 60000
    """group.share.max.record.lock.duration.ms."""
    group_share_min_delivery_count_limit: int = 2
    """group.share.min.delivery.count.limit."""
    group_share_max_delivery_count_limit: int = 10
    """group.share.max.delivery.count.limit."""
    offsets_retention_minutes: int = 10080
    """offsets.retention.minutes (7 days)."""
    admin_listen: str | None = "127.0.0.1:9644"
    """HOST:PORT of the HTTP admin API; None turns it off."""
    admin_allowed_hosts: tuple[str, ...] = ()
    """HOST or HOST:PORT names (lower case) the admin API answers to besides its own
    address; a name without a port is allowed with any port."""
    admin_token: str | None = field(default=None, repr=False)
    """The admin API's bearer token (weirmq.admin.token); None: the broker makes one at
    its first start and keeps it in ``<data_dir>/admin-token``. Out of repr, and shown by
    the admin API only as "(set)": it is a secret."""
    # The AMQP 0-9-1 listener (issue 21), kept together. The defaults are RabbitMQ's, so a
    # client tuned for RabbitMQ behaves the same here (weirmq.protocols.amqp.config).
    amqp_listen: str | None = "127.0.0.1:5672"
    """HOST:PORT of the AMQP listener (RabbitMQ's port); None turns it off."""
    amqp_users: tuple[tuple[str, str], ...] = field(default=(("guest", "guest"),), repr=False)
    """(user, password) pairs; RabbitMQ's default user, so clients' defaults connect. Out
    of repr: passwords must not reach a log line."""
    amqp_loopback_users: tuple[str, ...] = ("guest",)
    """RabbitMQ's `loopback_users`: the well-known default password must not open a broker
    listening on a public address."""
    amqp_vhosts: tuple[str, ...] = ("/",)
    """Virtual hosts; "/" is the one every client opens by default."""
    amqp_channel_max: int = 2047
    """RabbitMQ's `channel_max`: a client opening thousands of channels is leaking them."""
    amqp_frame_max_bytes: int = 131_072
    """RabbitMQ's `frame_max`; larger bodies travel as several frames."""
    amqp_heartbeat_s: int = 60
    """RabbitMQ's `heartbeat`."""
    amqp_handshake_timeout_ms: int = 10_000
    """RabbitMQ's `handshake_timeout`: a stalled handshake holds a socket for nothing."""
    amqp_message_bytes_max: int = 16 * 1024 * 1024
    """RabbitMQ 4's `max_message_size`."""
    amqp_idle_timeout_ms: int = 0
    """Off: AMQP has heartbeats, which find a dead peer within two intervals, and a client
    that turned them off (or a consumer waiting for deliveries) is quiet on purpose."""
    # The SQS API (HTTP, what AWS SDKs speak), kept together. SQS's own limits, so that a
    # client written against AWS behaves the same here (weirmq.protocols.sqs).
    sqs_listen: str | None = "127.0.0.1:9324"
    """HOST:PORT of the SQS API; None turns it off. ElasticMQ's port, the one local SQS
    set-ups already point their SDKs at."""
    sqs_region: str = "us-east-1"
    """The region in queue ARNs; AWS's default region, so a client configured for none
    sees ARNs as it would on AWS."""
    sqs_account_id: str = "000000000000"
    """The account in queue URLs (``http://HOST:PORT/ACCOUNT/QUEUE``) and ARNs; a string,
    since an account id's leading zeros are part of it. LocalStack's default."""
    sqs_access_keys: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """(access key id, secret key) pairs. Empty: signatures are not checked, so any SDK
    with any credentials (they all insist on some) is served, as by other local SQS
    servers. Otherwise a request not SigV4-signed with one of these keys is refused
    (403). Out of repr: secret keys must not reach a log line."""
    sqs_connections_max: int = 1000
    """HTTP connections to the SQS API open at once. One more is accepted and closed at
    once (SDKs retry a closed connection), so that clients cannot run the process out of
    file descriptors; the Kafka and AMQP listeners are bounded by `max_connections`."""
    sqs_request_bytes_max: int = 8 * 1024 * 1024
    """One HTTP request body at most. A larger one is answered 413 RequestEntityTooLarge
    without being read whole (and its connection closed), so a client cannot make the
    broker hold more than this per request. SQS's largest request is a batch of 1 MiB of
    messages, but on the wire it grows: botocore's JSON escapes non-ASCII text as \\uXXXX
    and the Query protocol percent-encodes, up to three times the message's bytes; hence
    8 MiB. At least `SQS_REQUEST_BYTES_MIN`."""
    sqs_long_polls_max: int = 1000
    """ReceiveMessage calls waiting for a message at once (WaitTimeSeconds > 0, all queues
    together). Each holds a connection, a waiter and a timer for up to 20 s; one more does
    not wait: it answers at once with what is there (maybe nothing), as a short poll would,
    so it holds nothing and its client simply polls again."""
    sqs_message_bytes_max: int = SQS_MESSAGE_BYTES_MAX
    """The largest message, body and attributes counted as SQS counts them; a larger
    SendMessage is refused InvalidParameterValue (in a batch, that entry fails). A queue
    whose MaximumMessageSize is smaller is held to that instead. SQS's own maximum."""
    sqs_idle_timeout_ms: int = 75_000
    """An HTTP keep-alive connection with no request for this long is closed (aiohttp's
    default); SDKs open a new one for their next request. A waiting ReceiveMessage is a
    request in progress, not idleness."""

    def __post_init__(self) -> None:
        for spec in SETTING_SPECS:
            value = getattr(self, spec.name)
            checked = _checked(spec, value, "passed to Settings()", parse_strings=False)
            if checked is not value:  # a str data_dir became a Path
                object.__setattr__(self, spec.name, checked)
        self._check_together()

    def _check_together(self) -> None:
        """Bounds that depend on another setting (see the module docstring)."""
        # The connection pump refuses frames above max_request_bytes, so a larger frame_max
        # would be offered to clients and then cut their connections. Checked only while
        # the AMQP listener is on: an off listener's limits constrain nothing.
        if self.amqp_listen is not None and self.amqp_frame_max_bytes > self.max_request_bytes:
            raise SettingsError(
                f"setting 'amqp_frame_max_bytes' ({self.amqp_frame_max_bytes}) must be at "
                f"most max_request_bytes ({self.max_request_bytes}): every AMQP frame is one "
                "request to the connection pump (or turn the AMQP listener off with "
                "amqp_listen = 'off')"
            )

    def listen_address(self) -> tuple[str, int]:
        """``listen`` split into host (IPv6 without brackets) and port."""
        return parse_host_port(self.listen)


# The table and the dataclass must not drift apart: a field without a row would be unloadable.
assert tuple(spec.name for spec in SETTING_SPECS) == tuple(f.name for f in fields(Settings))


# --- Loading --------------------------------------------------------------------------------


def load_settings(
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Settings from the defaults, a TOML file, the environment and overrides, in that order.

    ``config_file`` None means the file named by ``WEIRMQ_CONFIG``, or no file. ``environ``
    None means ``os.environ``. Overrides are keyed by setting name; a None value is a flag
    that was not given and is skipped. Raises ``SettingsError`` on the first unknown or
    invalid setting, or naming the file if it cannot be read or parsed.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    file_and_origin = _config_file(config_file, environ)
    if file_and_origin is not None:
        values.update(_file_layer(*file_and_origin))
    values.update(_environment_layer(environ))
    values.update(_override_layer(overrides or {}))
    return Settings(**values)


def _config_file(config_file: Path | None, environ: Mapping[str, str]) -> tuple[Path, str] | None:
    """The file to read and, for error messages, who named it."""
    if config_file is not None:
        return config_file, ""
    # An empty WEIRMQ_CONFIG is how a shell clears it (`WEIRMQ_CONFIG= weirmq serve`).
    named = environ.get(CONFIG_FILE_ENV_VAR, "")
    if not named:
        return None
    return Path(named), f" (named by {CONFIG_FILE_ENV_VAR})"


def _file_layer(path: Path, origin: str) -> dict[str, object]:
    source = f"in {path}"
    values: dict[str, object] = {}
    for key, value in _read_toml(path, origin).items():
        spec = SPECS_BY_NAME.get(key)
        if spec is None:
            raise _unknown(key, source, _quoted_name)
        values[key] = _checked(spec, value, source, parse_strings=False)
    return values


def _read_toml(path: Path, origin: str) -> dict[str, Any]:
    named = f"config file {path}{origin}"
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError as error:
        raise SettingsError(f"{named} does not exist") from error
    except OSError as error:
        raise SettingsError(f"cannot read {named}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise SettingsError(f"{named} is not valid UTF-8: {error.reason}") from error
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{named} is not valid TOML: {error}") from error


def _environment_layer(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for var in sorted(environ):  # sorted: the same environment always reports the same error
        if not var.startswith(ENV_PREFIX) or var in NOT_SETTINGS_ENV_VARS:
            continue
        source = f"from environment variable {var}"
        spec = _SPECS_BY_ENV_VAR.get(var)  # exact: WEIRMQ_node_id is not WEIRMQ_NODE_ID
        if spec is None:
            raise _unknown(var.removeprefix(ENV_PREFIX).lower(), source, _env_var)
        values[spec.name] = _checked(spec, environ[var], source, parse_strings=True)
    return values


def _override_layer(overrides: Mapping[str, object]) -> dict[str, object]:
    values: dict[str, object] = {}
    for key, value in overrides.items():
        if value is None:  # a flag that was not given
            continue
        source = f"from command-line flag {_flag_of(key)}"
        spec = SPECS_BY_NAME.get(key)
        if spec is None:
            raise _unknown(key, source, _flag)
        values[key] = _checked(spec, value, source, parse_strings=True)
    return values


def _checked(spec: SettingSpec, value: object, source: str, *, parse_strings: bool) -> object:
    """``value`` made ready for ``spec``, or a SettingsError naming the setting and source."""
    try:
        if parse_strings and isinstance(value, str):
            return spec.from_text(value)
        return spec.from_value(value)
    except _InvalidValue as error:
        raise SettingsError(f"setting {spec.name!r} {source}: {error}") from None


def _quoted_name(spec: SettingSpec) -> str:
    return repr(spec.name)


def _env_var(spec: SettingSpec) -> str:
    return spec.env_var


def _flag(spec: SettingSpec) -> str:
    return spec.flag


def _unknown(name: str, source: str, spell: Callable[[SettingSpec], str]) -> SettingsError:
    """The error for an unknown setting, with the closest known one spelled as ``source`` does."""
    close = difflib.get_close_matches(name.lower(), SPECS_BY_NAME, n=1)
    hint = f" (did you mean {spell(SPECS_BY_NAME[close[0]])}?)" if close else ""
    return SettingsError(f"unknown setting {name!r} {source}{hint}")


# --- Addresses ------------------------------------------------------------------------------

# Host names and IPv4 addresses; anything with a colon is IPv6 and must be bracketed, or the
# port could not be told apart from the address.
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PORT_TEXT = re.compile(r"[0-9]{1,5}")


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` or ``[IPv6]:PORT`` into host (without brackets) and port 0..65535.

    Raises ``SettingsError`` saying what is wrong with ``value``.
    """
    try:
        return _split_host_port(value)
    except _InvalidValue as error:
        raise SettingsError(str(error)) from None


def _split_host_port(value: str) -> tuple[str, int]:
    host, colon, port = value.rpartition(":")
    if not colon:
        raise _InvalidValue(f"expected HOST:PORT or [IPv6]:PORT, got {_show(value)}")
    return _parse_host(host, value), _parse_port(port, value)


def _parse_host(host: str, value: str) -> str:
    if host.startswith("[") and host.endswith("]"):
        return _parse_ipv6(host[1:-1], value)
    if ":" in host or "[" in host or "]" in host:
        raise _InvalidValue(
            f"an IPv6 address goes in brackets, as in [::1]:9092; got {_show(value)}"
        )
    if _HOST_NAME.fullmatch(host) is None:
        raise _InvalidValue(
            f"expected a host name or IP address before the port, got {_show(value)}"
        )
    return host


def _parse_ipv6(address: str, value: str) -> str:
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise _InvalidValue(f"expected an IPv6 address in brackets, got {_show(value)}") from None
    return address


def _parse_port(port: str, value: str) -> int:
    if _PORT_TEXT.fullmatch(port) is None or int(port) > PORT_MAX:
        expected = f"expected a port number 0..{PORT_MAX} after the colon"
        raise _InvalidValue(f"{expected}, got {_show(value)}")
    return int(port)
