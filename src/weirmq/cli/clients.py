"""What the client commands (``topics``, ``groups``, ``produce``, ``consume``) share: where
the broker is, whether it answers, and how a failure becomes one line on stderr and an
exit code.

Theory of operation:

- Every client command takes ``--bootstrap HOST:PORT[,HOST:PORT...]`` (or the
  ``WEIRMQ_BOOTSTRAP`` environment variable), checked when the options are parsed: a
  malformed address is a usage error like any other (exit code 2).
- Before a command builds a librdkafka client, ``check_reachable`` opens a plain TCP
  connection to the bootstrap addresses with a short timeout. librdkafka on its own keeps
  retrying a refused connection until its request timeout runs out and then reports a vague
  transport failure; the TCP check turns the commonest failure, a broker that is not
  running, into an immediate and precise ``cannot reach a broker at ... (connection
  refused)`` with exit code 3.
- librdkafka logs to stderr by default. Our clients run with ``log_level`` 0, so the user
  sees only our messages; the errors themselves still reach us, through futures, delivery
  reports, ``msg.error()`` and ``error_cb``.
- A failure is a ``CommandError`` (a ``click.ClickException``): click prints it with our
  ``weirmq:`` prefix and exits with its code, and no traceback is shown. ``kafka_errors``
  turns the ``KafkaException`` of a failed call into one, naming what we were doing.

confluent-kafka is imported inside the functions, never at module level: ``weirmq serve``
imports this package too, and its start-up must not pay for librdkafka.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from weirmq.cli.lazy import EXIT_CODES_EPILOG

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka import Consumer, KafkaError, Producer

    from weirmq.cli.kafka_admin import AdminClient, TopicMetadata

# Exit codes of the client commands; docs/cli.md and the --help epilogs (lazy.py) list them.
EXIT_OK = 0
EXIT_BROKER_ERROR = 1  # the broker answered with an error, or records were not delivered
EXIT_USAGE = 2  # click's own code for a usage error
EXIT_UNREACHABLE = 3  # no broker could be reached, or it stopped answering

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV_VAR = "WEIRMQ_BOOTSTRAP"
CLIENT_ID = "weirmq-cli"
# Short: the broker is usually local, and a user waiting on a dead address wants to know now.
CONNECT_TIMEOUT_S = 3.0
# How long one admin request (or a metadata lookup) may take before we give up on it.
REQUEST_TIMEOUT_S = 15.0
# librdkafka's syslog-style level: 0 lets nothing through to stderr.
QUIET_LOG_LEVEL = 0

# librdkafka's local error codes for "no broker answered": exit code 3, not 1.
UNREACHABLE_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT"})

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """A failure to report in one line, with the exit code scripts can rely on."""

    exit_code = EXIT_BROKER_ERROR

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name  # the Kafka error behind it (e.g. TOPIC_ALREADY_EXISTS)

    def show(self, file: IO[Any] | None = None) -> None:
        # click.echo drops the colour when stderr is not a terminal.
        prefix = click.style("weirmq:", fg="red", bold=True)
        click.echo(f"{prefix} {self.format_message()}", err=True)


class BrokerUnreachable(CommandError):
    """No broker could be reached, or the one we reached stopped answering."""

    exit_code = EXIT_UNREACHABLE


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """The ``--bootstrap`` addresses, as given (for librdkafka) and parsed (for the check)."""

    servers: str
    addresses: tuple[Address, ...]

    def __str__(self) -> str:
        return self.servers


def parse_address(text: str) -> Address:
    """``host:port`` or ``[v6-host]:port`` -> Address; ValueError says what is wrong."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} of {text!r} is not between 1 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Address(host, port)


def parse_bootstrap(text: str) -> Bootstrap:
    """A comma-separated list of addresses, like librdkafka's ``bootstrap.servers``."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("no address given")
    addresses = tuple(parse_address(part) for part in parts)
    return Bootstrap(",".join(str(address) for address in addresses), addresses)


def _bootstrap_callback(ctx: click.Context, param: click.Parameter, value: str) -> Bootstrap:
    try:
        return parse_bootstrap(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def bootstrap_option(command: F) -> F:
    """``--bootstrap HOST:PORT`` (env WEIRMQ_BOOTSTRAP), passed on as a ``Bootstrap``."""
    return click.option(
        "--bootstrap",
        "-b",
        metavar="HOST:PORT",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar=BOOTSTRAP_ENV_VAR,
        show_envvar=True,
        callback=_bootstrap_callback,
        help="Broker to talk to; several may be given, separated by commas.",
    )(command)


def json_option(command: F) -> F:
    """``--json``: machine-readable output on stdout instead of tables and sentences."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print JSON on stdout, for scripts (shapes in docs/cli.md).",
    )(command)


def client_command_settings() -> dict[str, Any]:
    """Settings shared by every client command: the exit codes in its --help."""
    return {"epilog": EXIT_CODES_EPILOG}


# -- reachability ------------------------------------------------------------------------------


def connect_failure(address: Address, timeout_s: float) -> str | None:
    """Why a TCP connection to ``address`` fails (a short phrase), or None if it works."""
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except socket.gaierror:
        return f"unknown host {address.host!r}"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def check_reachable(bootstrap: Bootstrap, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Return if any bootstrap address accepts a TCP connection, else raise BrokerUnreachable."""
    failures = []
    for address in bootstrap.addresses:
        reason = connect_failure(address, timeout_s)
        if reason is None:
            return
        failures.append((address, reason))
    if len(failures) == 1:
        address, reason = failures[0]
        raise BrokerUnreachable(f"cannot reach a broker at {address} ({reason})")
    details = "; ".join(f"{address}: {reason}" for address, reason in failures)
    raise BrokerUnreachable(f"cannot reach any broker of {bootstrap} ({details})")


# -- librdkafka clients ------------------------------------------------------------------------


def client_config(bootstrap: Bootstrap, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings every client gets, then ``extra``."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap.servers,
        "client.id": CLIENT_ID,
        "log_level": QUIET_LOG_LEVEL,
        "socket.connection.setup.timeout.ms": int(CONNECT_TIMEOUT_S * 1000),
    }
    config.update(extra or {})
    return config


def admin_client(bootstrap: Bootstrap) -> AdminClient:
    """An AdminClient for a broker known to accept connections.

    Metadata lookups of an AdminClient create missing topics by default (librdkafka treats
    it as a producer); ``topics describe`` of a typo must say "does not exist" instead.
    """
    from weirmq.cli.kafka_admin import AdminClient

    check_reachable(bootstrap)
    return AdminClient(client_config(bootstrap, {"allow.auto.create.topics": False}))


def topic_metadata(
    client: AdminClient | Producer | Consumer, topic: str, bootstrap: Bootstrap
) -> TopicMetadata:
    """The metadata of ``topic``, or CommandError "topic ... does not exist".

    Whether looking up a missing topic creates it depends on the client, as in any Kafka
    tool: a Producer's lookup may (if the broker auto-creates), a Consumer's and our
    AdminClient's never do.
    """
    from confluent_kafka import KafkaError, KafkaException

    with kafka_errors(f"cannot look up topic {topic!r}", bootstrap, topic):
        found = client.list_topics(topic=topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
        if found is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        # A topic without a leader yet (just created) is there all the same.
        if found.error is not None and found.error.name() != "LEADER_NOT_AVAILABLE":
            raise KafkaException(found.error)
    return found


def check_partitions(topic: str, wanted: Iterable[int], existing: Iterable[int]) -> None:
    """CommandError naming the first of ``wanted`` that the topic does not have."""
    missing = sorted(set(wanted) - set(existing))
    if missing:
        count = len(set(existing))
        raise CommandError(
            f"topic {topic!r} has no partition {missing[0]} (it has {count}: 0-{count - 1})"
        )


# -- errors ------------------------------------------------------------------------------------

# Errors whose code says everything: no need for librdkafka's text.
PLAIN_MESSAGES = {
    "TOPIC_ALREADY_EXISTS": "topic {topic!r} already exists",
    "UNKNOWN_TOPIC_OR_PART": "topic {topic!r} does not exist",
}


def error_for(error: KafkaError, doing: str, bootstrap: Bootstrap, topic: str = "") -> CommandError:
    """The CommandError for ``error``, which happened while ``doing`` (e.g. "cannot create
    topic 'x'"): exit code 3 when no broker answered, else 1."""
    name = error.name()
    if name in UNREACHABLE_ERRORS:
        message = f"{doing}: no answer from the broker at {bootstrap} ({error.str()})"
        return BrokerUnreachable(message, name)
    if name in PLAIN_MESSAGES and topic:
        return CommandError(PLAIN_MESSAGES[name].format(topic=topic), name)
    return CommandError(f"{doing}: {error.str()} ({name})", name)


@contextmanager
def kafka_errors(doing: str, bootstrap: Bootstrap, topic: str = "") -> Iterator[None]:
    """Turn a KafkaException raised inside the block into the matching CommandError."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        raise error_for(exc.args[0], doing, bootstrap, topic) from None


def wait_for(future: Future[T], doing: str, bootstrap: Bootstrap, topic: str = "") -> T:
    """The result of an admin future, with its failure translated like ``kafka_errors``.

    The request itself times out after REQUEST_TIMEOUT_S; the extra second here only
    guards against a future that librdkafka never completes.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    with kafka_errors(doing, bootstrap, topic):
        try:
            return future.result(timeout=REQUEST_TIMEOUT_S + 1.0)
        except FutureTimeout:
            raise BrokerUnreachable(
                f"{doing}: no answer from the broker at {bootstrap} within {REQUEST_TIMEOUT_S:g} s"
            ) from None


# -- the admin API (what Kafka's protocol cannot do) --------------------------------------------

ADMIN_URL = "http://127.0.0.1:9644"
"""The broker's HTTP admin API (`weirmq serve`'s default admin_listen)."""
ADMIN_TIMEOUT_S = 30.0


def admin_url_option(why: str) -> Callable[[F], F]:
    """``--admin-url`` (also WEIRMQ_ADMIN_URL), for a command that needs the admin API."""
    return click.option(
        "--admin-url",
        default=ADMIN_URL,
        show_default=True,
        envvar="WEIRMQ_ADMIN_URL",
        help=f"The broker's admin API ({why}).",
    )


def admin_request(
    admin_url: str,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> dict[str, Any]:
    """One request to the admin API; the answer's JSON, or CommandError with the API's own
    message and code (BrokerUnreachable when nothing answers)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        admin_url.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read())["error"]
            message, code = error["message"], error["code"]
        except (ValueError, KeyError, TypeError):
            message, code = f"HTTP {exc.code}", None
        raise CommandError(message, code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BrokerUnreachable(
            f"no admin API answered at {admin_url} ({reason}); set --admin-url"
        ) from None
