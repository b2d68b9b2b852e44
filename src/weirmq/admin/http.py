"""The HTTP admin API and ``/metrics``, served by aiohttp on the broker's own event loop.

Theory of operation
-------------------
`AdminService` is a `weirmq.server.run.Service`: ``serve`` starts it after the Kafka
listener is up, on the same event loop, and stops it before the broker closes. Because
the handlers run on the loop thread, the thread that owns all broker state, they read and
change that state directly, with no locks and no copies, exactly as a Kafka request
handler does; topic creation through this API and through CreateTopics are one code path
(`Broker.create_topic`). The price is that a handler must be quick: each one here is
proportional to the number of topics and partitions (or of an exchange's bindings), or
bounded by a named limit (`weirmq.admin.operations`: records browsed, moved by a redrive),
and none waits on anything but the request body and, for a write, its fsync (an awaited
future: the storage layer's group commit runs on its own thread).

The service also runs the sampler of the traffic history (`weirmq.admin.history`) that
the overview shows: a task on the loop, started and stopped with the service.

Routes (all JSON, described in `weirmq.admin.openapi`, served at ``/openapi.json``)::

    GET    /api/v1/health                                  200 or 503
    GET    /api/v1/broker
    GET    /api/v1/topics                 POST /api/v1/topics      201
    GET    /api/v1/topics/{name}          DELETE                   204
    GET    /api/v1/topics/{name}/partitions[/{partition}]
    GET    /api/v1/topics/{name}/configs  PATCH                    200
    GET    /api/v1/groups
    GET    /api/v1/groups/{group}         DELETE                   204
    GET    /api/v1/groups/{group}/configs PATCH                    200
                                          POST .../offsets         200 (token unless dry_run)
    GET    /api/v1/overview                                status, counts, traffic history
    GET    /api/v1/connections                             open connections per protocol
    GET    /api/v1/queues                                  share-partitions of share groups
    GET    /api/v1/topics/{name}/messages POST                     201 (browse, produce one)
    POST   /api/v1/topics/{name}/trim                      200 (token; DeleteRecords)
    POST   /api/v1/topics/{name}/redrive                   200 (token; copy, then trim)
    GET    /api/v1/exchanges              POST /api/v1/exchanges   201, 200 if declared
    GET    /api/v1/exchanges/{name}       DELETE [?if_unused=true] 204
    GET    /api/v1/exchanges/{name}/bindings  POST                 201, 200 if bound
    POST   /api/v1/exchanges/{name}/bindings/delete                204
    POST   /api/v1/exchanges/{name}/replay                         200 when re-routed
    GET    /openapi.json
    GET    /metrics                                        Prometheus text format

The console's endpoints (overview, connections, queues, messages, offsets reset, trim,
redrive) live in `weirmq.admin.operations`, which says which broker path each takes;
`weirmq.admin.requests` reads and checks what every request sends. The console's own
static files (``/``, ``/console/...``) are `weirmq.admin.console`'s.

A group is read from the coordinator's views (`Broker.group_views`, `Broker.group_lag`)
and deleted by `Broker.delete_group`, the code path of a Kafka DeleteGroups request. Its
configs (`weirmq.broker.group_configs`) are read and changed through `Broker.group_configs`,
the store a Kafka DescribeConfigs or IncrementalAlterConfigs on the GROUP resource uses, so
both APIs check names, values and the broker's bounds alike. As in Kafka, a group need not
exist to have configs: they may be set before its first member joins, so these two
endpoints never answer 404 for an unknown group.

An exchange is a topic with an exchange type (`weirmq.broker.exchanges`): it is declared
through `Broker.create_topic` and deleted through `Broker.delete_topic`, as a Kafka client
would, so both APIs see one set of exchanges. A declaration is idempotent, as in RabbitMQ:
declaring what exists answers 200 with it, a different definition is refused naming the
first field that differs. Bindings go through `Broker.exchanges`; a handler that changed one
(binding, unbinding, deleting an exchange) answers once the change is fsynced. A binding has
no identity but its fields, so it is removed by POSTing those fields to ``.../delete``: a
DELETE with a body has no defined meaning in HTTP (proxies and clients may drop it), and
putting typed arguments in a URL would need an encoding of its own.

Who may ask: a token (`weirmq.admin.token`: the ``admin_token`` setting, or one the broker
makes and keeps in ``<data_dir>/admin-token``), sent as ``Authorization: Bearer``, is
needed (401 ``UNAUTHORIZED`` with ``WWW-Authenticate: Bearer`` otherwise):

- always, for what destroys: every routed DELETE (`_authorized`), and, since only their
  bodies say whether they are dry runs, the offsets reset (unless a dry run), the trim
  and the redrive, which ask for it themselves (`weirmq.admin.requests.require_token`);
- when ``admin_listen`` binds beyond loopback (`listens_on_loopback`), for every request
  to ``/api``, ``/metrics`` and ``/openapi.json`` but ``GET /api/v1/health`` (a load
  balancer's probe); never for the console's static files.

On loopback everything else is open, to the operator's tools and to any web page the
operator's browser opens as well. So one middleware (`_only_for_this_api`), run before
every handler and before the token check (aiohttp's 404 and 405 included), refuses what
only a browser doing a hostile page's bidding would send:

- a ``Host`` that is not one of this API's names (421): a DNS-rebinding page reaches the
  port under the attacker's own name, and so could read and change everything. The names
  are the address the connection arrived on, ``localhost`` and the loopback addresses when
  it arrived on loopback, and ``settings.admin_allowed_hosts``. Ports are compared only
  for a name given with one: the attacker controls the name, and tunnels and port mappings
  change the port. No ``Host`` at all (HTTP/1.0 tools) is not a browser's, and passes.
- on a routed request that changes something (POST, PUT, PATCH, DELETE), an ``Origin`` other
  than the one the ``Host`` names (403): a page of another site. Browsers send ``Origin``
  with every such request; curl, the CLI and Prometheus send none.
- on those, a body not labelled ``application/json`` (415): HTML forms and fetches that a
  browser sends cross-origin without asking first (``text/plain``, form encodings) can
  carry JSON text, and would otherwise be obeyed.
- an ``OPTIONS`` (a CORS preflight) from another origin (403); others get 405 with
  ``Allow``. No answer carries ``Access-Control-Allow-*``: no other origin may read or
  change anything, and a browser enforces that without being told more.

Nothing a request sends can take the broker down: one middleware turns every failure into
the JSON error shape of `weirmq.admin.errors` (4xx for the request's faults, 500 for
ours, logged), bodies are capped at `BODY_BYTES_MAX` before they are parsed, and request
fields are checked for type before the broker sees them. aiohttp's access log is off: a
Prometheus scrape every few seconds would otherwise be most of the broker's log.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from weirmq.broker import configs
from weirmq.broker.core import Broker
from weirmq.broker.group_configs import SetOp
from weirmq.broker.topics import Topic
from weirmq.settings import Settings, parse_host_port

from . import console, openapi, operations, views
from .deferred import admin_announcement
from .errors import (
    BINDING_NOT_FOUND,
    EXCHANGE_CONFLICT,
    EXCHANGE_IN_USE,
    HOST_NOT_ALLOWED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ORIGIN_NOT_ALLOWED,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_MEDIA_TYPE,
    ApiError,
    error_response,
    from_http_exception,
    from_kafka_error,
)
from .history import History, Sampler
from .metrics import exposition, metrics_registry
from .requests import BROKER, TOKEN, require_token
from .requests import DIGITS as _DIGITS
from .requests import PARTITION_DIGITS_MAX as _PARTITION_DIGITS_MAX
from .requests import check_unicode as _check_unicode
from .requests import flag as _flag
from .requests import group_of as _group
from .requests import json_object as _json_object
from .requests import string as _string
from .requests import topic_of as _topic
from .token import AdminToken, load_or_create

log = logging.getLogger(__name__)

BODY_BYTES_MAX = 1 << 20
"""Largest request body read; a topic with a thousand configs fits many times over."""

REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)
OPENAPI_JSON = web.AppKey("openapi_json", bytes)
ALLOWED_HOSTS = web.AppKey("allowed_hosts", frozenset)
"""`Authority` values of ``settings.admin_allowed_hosts``."""
TOKEN_EVERYWHERE = web.AppKey("token_everywhere", bool)
"""Whether every request needs the token (`admin_listen` binds beyond loopback)."""

_CREATE_TOPIC_FIELDS = frozenset({"name", "partitions", "configs"})
_ALTER_CONFIGS_FIELDS = frozenset({"set", "delete"})
_DECLARE_EXCHANGE_FIELDS = frozenset({"name", "type", "partitions", "alternate", "unroutable"})
_BINDING_FIELDS = frozenset({"destination", "key", "arguments", "expression"})
_REPLAY_FIELDS = _BINDING_FIELDS | {"from_timestamp_ms", "from_offsets", "to_offsets"}
_UNROUTABLE_POLICIES = ("drop", "reject")
_UNROUTABLE_DEFAULT = "drop"
# Exactly Kafka's topic names: the broker's config check would take " x " as "x".
_EXCHANGE_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

ArgumentValue = str | int | float | bool | None


# --- the service ----------------------------------------------------------------------------


class AdminService:
    """Runs `create_app` on ``settings.admin_listen``; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._runner: web.AppRunner | None = None
        self._address: tuple[str, int] | None = None
        self._sampler: Sampler | None = None
        self.history: History | None = None
        """The traffic history to serve: set before `start` by whoever samples it already
        (`weirmq.admin.deferred`); when None, `start` makes one and samples it itself."""
        self.token: AdminToken | None = None
        """The token changes need (`weirmq.admin.token`), once started."""

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound; the port is the real one when 0 was asked for."""
        if self._address is None:
            raise RuntimeError("the admin API has not started")
        return self._address

    async def start(self, broker: Broker, sockets: Sequence[socket.socket] = ()) -> str:
        """Bind ``settings.admin_listen`` and serve, or serve on `sockets` when given (bound
        and listening already: see `weirmq.admin.deferred`); returns the line announcing
        where."""
        if self.settings.admin_listen is None:
            raise ValueError("admin_listen is off; there is nothing to start")
        host, port = parse_host_port(self.settings.admin_listen)
        self.token = token = load_or_create(self.settings)
        if self.history is None:
            self.history = History()
            self._sampler = Sampler(self.history, partial(operations.read_totals, broker))
            self._sampler.start()
        app = create_app(broker, token, self.history)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            # Handlers never wait, so this only bounds a client still sending its body.
            shutdown_timeout=self.settings.shutdown_timeout_ms / 1000,
        )
        await self._runner.setup()
        if sockets:
            for sock in sockets:
                await web.SockSite(self._runner, sock).start()
        else:
            await web.TCPSite(self._runner, host, port).start()
        bound = self._runner.addresses[0]
        self._address = (str(bound[0]), int(bound[1]))
        url = f"http://{views.format_address(*self._address)}"
        return admin_announcement(url, token)

    async def stop(self) -> None:
        """Stop serving (idempotent; also after a start that failed half way)."""
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            await sampler.stop()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def create_app(
    broker: Broker, token: AdminToken | None = None, history: History | None = None
) -> web.Application:
    """The admin application for `broker` (tests serve it with aiohttp's test server);
    `token` defaults to the one of the broker's settings (`weirmq.admin.token`), and
    `history` to one holding a single base sample (fed by nobody: see `AdminService`)."""
    app = web.Application(
        client_max_size=BODY_BYTES_MAX,
        middlewares=[_errors_as_json, _only_for_this_api, _authorized],
    )
    app[BROKER] = broker
    app[TOKEN] = token if token is not None else load_or_create(broker.settings)
    app[TOKEN_EVERYWHERE] = not listens_on_loopback(broker.settings.admin_listen)
    if history is None:
        history = History()
        history.sample(*operations.read_totals(broker))  # the base of the first rates
    app[operations.HISTORY] = history
    app[ALLOWED_HOSTS] = allowed_hosts(broker.settings.admin_allowed_hosts)
    app[REGISTRY] = metrics_registry(broker)
    app[OPENAPI_JSON] = json.dumps(openapi.document()).encode()
    app.add_routes(
        [
            web.get("/api/v1/health", get_health),
            web.get("/api/v1/broker", get_broker),
            web.get("/api/v1/topics", list_topics),
            web.post("/api/v1/topics", create_topic),
            web.get("/api/v1/topics/{name}", get_topic, name="topic"),
            web.delete("/api/v1/topics/{name}", delete_topic),
            web.get("/api/v1/topics/{name}/partitions", list_partitions),
            web.get("/api/v1/topics/{name}/partitions/{partition}", get_partition),
            web.get("/api/v1/topics/{name}/configs", describe_configs),
            web.patch("/api/v1/topics/{name}/configs", alter_configs),
            web.get("/api/v1/groups", list_groups),
            web.get("/api/v1/groups/{group}", get_group),
            web.delete("/api/v1/groups/{group}", delete_group),
            web.get("/api/v1/groups/{group}/configs", describe_group_configs),
            web.patch("/api/v1/groups/{group}/configs", alter_group_configs),
            web.get("/api/v1/exchanges", list_exchanges),
            web.post("/api/v1/exchanges", declare_exchange),
            web.get("/api/v1/exchanges/{name}", get_exchange, name="exchange"),
            web.delete("/api/v1/exchanges/{name}", delete_exchange),
            web.get("/api/v1/exchanges/{name}/bindings", list_bindings),
            web.post("/api/v1/exchanges/{name}/bindings", bind),
            web.post("/api/v1/exchanges/{name}/bindings/delete", unbind),
            web.post("/api/v1/exchanges/{name}/replay", replay),
            web.get("/api/v1/overview", operations.get_overview),
            web.get("/api/v1/connections", operations.get_connections),
            web.get("/api/v1/queues", operations.list_queues),
            web.get("/api/v1/topics/{name}/messages", operations.browse_messages),
            web.post("/api/v1/topics/{name}/messages", operations.produce_message),
            web.post("/api/v1/topics/{name}/trim", operations.trim),
            web.post("/api/v1/topics/{name}/redrive", operations.redrive),
            web.post("/api/v1/groups/{group}/offsets", operations.reset_offsets),
            web.get("/openapi.json", get_openapi),
            web.get("/metrics", get_metrics),
            *console.routes(),
        ]
    )
    return app


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves in the JSON error shape; see `weirmq.admin.errors`."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:  # aiohttp's: no route, wrong method, body too large
        if exc.status < 400:
            raise
        return from_http_exception(exc)
    except Exception as exc:
        refused = from_kafka_error(exc)
        if refused is not None and refused.status < 500:
            return refused.response()
        log.exception("admin API: %s %s failed", request.method, request.path)
        if refused is not None:
            return refused.response()
        return error_response(500, INTERNAL_ERROR, "internal error; the broker log has details")


# --- who may ask ----------------------------------------------------------------------------

_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON = "application/json"
# A Host header or an allowed name, lower-cased: a DNS name or IPv4 address, or an IPv6
# address in brackets, and maybe a port. Anything else (user info, a zone, spaces) is no
# name of ours.
_AUTHORITY = re.compile(
    r"(?:(?P<name>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)|\[(?P<ipv6>[0-9a-f:.]+)\])"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#]+)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Authority:
    """A host as a ``Host`` header, an ``Origin`` or an allowed name gives it."""

    name: str
    """Lower case; an IPv6 address without its brackets."""
    port: int | None
    """None when not given."""


def parse_authority(text: str) -> Authority | None:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; None for anything else."""
    match = _AUTHORITY.fullmatch(text.strip().lower())
    if match is None:
        return None
    port = match["port"]
    if port is not None and int(port) > 65535:
        return None
    return Authority(match["name"] or match["ipv6"], None if port is None else int(port))


def allowed_hosts(names: Iterable[str]) -> frozenset[Authority]:
    """The operator's names (already checked by `weirmq.settings`) as `Authority` values."""
    found = set()
    for name in names:
        authority = parse_authority(name)
        assert authority is not None, name
        found.add(authority)
    return frozenset(found)


def host_allowed(host: Authority, local_address: str | None, named: frozenset[Authority]) -> bool:
    """Whether a request whose ``Host`` is `host`, arriving on `local_address` (the
    connection's own end), is meant for this API.

    The port is not compared for the API's own names: what a DNS-rebinding page controls
    is the name, and a port mapping, a tunnel or a proxy may change the port. An allowed
    name given with a port allows that port only."""
    if host in named or Authority(host.name, None) in named:
        return True
    local = _ip(local_address) if local_address is not None else None
    if local is None:
        return False
    ip = _ip(host.name)
    if ip == local:
        return True
    return local.is_loopback and (host.name == "localhost" or (ip is not None and ip.is_loopback))


def same_origin(origin: str, host: Authority) -> bool:
    """Whether `origin` (an ``Origin`` header) is the site that `host` names: the page
    was served by this API itself, under the name the request uses."""
    match = _ORIGIN.fullmatch(origin.strip().lower())
    if match is None:  # "null" (a sandboxed frame, a file), or no origin a browser sends
        return False
    authority = parse_authority(match["authority"])
    if authority is None:
        return False
    default_port = _DEFAULT_PORTS[match["scheme"]]
    return authority.name == host.name and (authority.port or default_port) == (
        host.port or default_port
    )


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@web.middleware
async def _only_for_this_api(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse what a browser sends on a hostile page's behalf (see the module docstring);
    raises `ApiError`, which `_errors_as_json` answers."""
    host = _checked_host(request)
    origin = request.headers.get("Origin")
    if request.method == "OPTIONS" and origin is not None:
        _check_origin(origin, host, "a CORS preflight")
    # No route, or not with this method: the handler answers 404 or 405, changing nothing.
    routed = request.match_info.http_exception is None
    if routed and request.method in _STATE_CHANGING:
        if origin is not None:
            _check_origin(origin, host, "a change")
        _check_json_body(request)
    return await handler(request)


_PUBLIC_API_PATHS = frozenset({"/api/v1/health"})
"""What anyone may ask even where every request needs the token: a load balancer's
health check carries none."""


@web.middleware
async def _authorized(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The token (`weirmq.admin.token`): on every DELETE, and off loopback on every request
    for the API, /metrics and /openapi.json but the health check. The console's static
    files need none (they hold nothing of the broker's); a handler whose body decides
    (an offsets reset unless a dry run, a trim, a redrive) asks for it itself."""
    routed = request.match_info.http_exception is None  # else a 404 or 405, changing nothing
    if routed and request.method == "DELETE":
        require_token(request, f"DELETE {request.path}")
    elif request.app[TOKEN_EVERYWHERE] and _needs_token_off_loopback(request.path):
        require_token(request, "a request to an admin API listening beyond loopback")
    return await handler(request)


def _needs_token_off_loopback(path: str) -> bool:
    if path in _PUBLIC_API_PATHS:
        return False
    return path in ("/api", "/metrics", "/openapi.json") or path.startswith("/api/")


def listens_on_loopback(listen: str | None) -> bool:
    """Whether ``admin_listen`` binds loopback only: ``localhost`` or a loopback address.
    Any other name may resolve to anything, so it counts as beyond loopback."""
    if listen is None:
        return True
    host, _port = parse_host_port(listen)
    if host.lower() == "localhost":
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def _checked_host(request: web.Request) -> Authority | None:
    """The request's ``Host``, refused (421) unless it names this API; None if absent."""
    texts = request.headers.getall("Host", [])
    if not texts:
        return None
    host = parse_authority(texts[0]) if len(texts) == 1 else None
    if host is None or not host_allowed(host, _local_address(request), request.app[ALLOWED_HOSTS]):
        raise ApiError(
            421,
            HOST_NOT_ALLOWED,
            f"Host {', '.join(texts)!r} is not a name of this admin API; it answers to the "
            "address it is reached on, localhost on loopback, and the names listed in "
            "admin_allowed_hosts",
        )
    return host


def _check_origin(origin: str, host: Authority | None, what: str) -> None:
    if host is None or not same_origin(origin, host):
        raise ApiError(
            403,
            ORIGIN_NOT_ALLOWED,
            f"{what} from the web page at {origin!r} is refused: the admin API takes "
            "changes only from clients that send no Origin (curl, the CLI) or from its "
            "own origin",
        )


def _check_json_body(request: web.Request) -> None:
    """A body must be declared JSON: the content types a page may send to any site without
    asking first (forms, text/plain) are never JSON, whatever the body holds."""
    if not request.body_exists:
        return  # a DELETE, or a body-less POST (which the handler refuses as MALFORMED_JSON)
    declared = request.headers.get("Content-Type")
    mime = (declared or "").partition(";")[0].strip().lower()
    if mime != _JSON:
        raise ApiError(
            415,
            UNSUPPORTED_MEDIA_TYPE,
            f"the body must be JSON sent with Content-Type: {_JSON}; "
            f"got {declared or 'no Content-Type'!r}",
        )


def _local_address(request: web.Request) -> str | None:
    """The host of the connection's own end: the listener's address it arrived on."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sockname, tuple) and sockname and isinstance(sockname[0], str):
        return sockname[0]
    return None


# --- handlers -------------------------------------------------------------------------------


async def get_health(request: web.Request) -> web.Response:
    document, healthy = views.health(request.app[BROKER])
    return web.json_response(document, status=200 if healthy else 503)


async def get_broker(request: web.Request) -> web.Response:
    return web.json_response(views.broker_document(request.app[BROKER]))


async def list_topics(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topics = sorted(broker.topics, key=lambda topic: topic.name)
    return web.json_response({"topics": [views.topic_summary(broker, t) for t in topics]})


async def create_topic(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = await _json_object(request, _CREATE_TOPIC_FIELDS)
    name = _string(body, "name")
    partitions = _partition_count(body, broker.settings.default_partitions)
    configs = _string_map(body, "configs")
    topic = broker.create_topic(name, partitions, configs)
    location = request.app.router["topic"].url_for(name=topic.name)
    return web.json_response(
        views.topic_detail(broker, topic), status=201, headers={"Location": str(location)}
    )


async def get_topic(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    return web.json_response(views.topic_detail(broker, _topic(request)))


async def delete_topic(request: web.Request) -> web.Response:
    topic = _topic(request)
    request.app[BROKER].delete_topic(topic.name)
    return web.Response(status=204)


async def list_partitions(request: web.Request) -> web.Response:
    broker, topic = request.app[BROKER], _topic(request)
    return web.json_response(
        {"topic": topic.name, "partitions": views.partitions_of(broker, topic)}
    )


async def get_partition(request: web.Request) -> web.Response:
    topic = _topic(request)
    text = request.match_info["partition"]
    if _DIGITS.fullmatch(text) is None:
        raise ApiError(400, INVALID_REQUEST, "the partition must be a number from 0")
    if len(text) > _PARTITION_DIGITS_MAX or int(text) >= topic.partitions:
        raise ApiError(
            404,
            UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}",
        )
    partition_document = views.partition_document(request.app[BROKER], topic.name, int(text))
    return web.json_response(partition_document)


async def describe_configs(request: web.Request) -> web.Response:
    broker, topic = request.app[BROKER], _topic(request)
    entries = broker.describe_topic_configs(topic.name)
    return web.json_response(views.configs_document(topic.name, entries))


async def alter_configs(request: web.Request) -> web.Response:
    broker, topic = request.app[BROKER], _topic(request)
    body = await _json_object(request, _ALTER_CONFIGS_FIELDS)
    to_set = _string_map(body, "set")
    to_delete = _string_list(body, "delete")
    broker.alter_topic_configs(topic.name, to_set, to_delete)
    entries = broker.describe_topic_configs(topic.name)
    return web.json_response(views.configs_document(topic.name, entries))


async def list_groups(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    groups = [views.group_summary(broker, view) for view in broker.group_views()]
    return web.json_response({"groups": groups})


async def get_group(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    return web.json_response(views.group_detail(broker, _group(request)))


async def delete_group(request: web.Request) -> web.Response:
    # The broker refuses an unknown group (404) and one with members (409) itself.
    request.app[BROKER].delete_group(request.match_info["group"])
    return web.Response(status=204)


async def describe_group_configs(request: web.Request) -> web.Response:
    broker, group_id = request.app[BROKER], _group_id(request)
    entries = broker.group_configs.describe(group_id)
    return web.json_response(views.group_configs_document(group_id, entries))


async def alter_group_configs(request: web.Request) -> web.Response:
    """The topic endpoint's body and answer; the change is IncrementalAlterConfigs' (SET
    then DELETE, checked as a whole: a name both set and deleted is refused), written to
    disk before the answer."""
    broker, group_id = request.app[BROKER], _group_id(request)
    body = await _json_object(request, _ALTER_CONFIGS_FIELDS)
    to_set = _string_map(body, "set")
    to_delete = _string_list(body, "delete")
    ops: list[tuple[str, int, str | None]] = [
        (name, SetOp.SET, value) for name, value in to_set.items()
    ]
    ops += [(name, SetOp.DELETE, None) for name in to_delete]
    broker.group_configs.alter(group_id, ops, validate_only=False)
    entries = broker.group_configs.describe(group_id)
    return web.json_response(views.group_configs_document(group_id, entries))


async def list_exchanges(request: web.Request) -> web.Response:
    exchanges = request.app[BROKER].exchanges
    names = sorted(exchange.name for exchange in exchanges.router.exchanges())
    summaries = [views.exchange_summary(exchanges.describe(name)) for name in names]
    return web.json_response({"exchanges": summaries})


async def declare_exchange(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = await _json_object(request, _DECLARE_EXCHANGE_FIELDS)
    name = _string(body, "name")
    wanted = _exchange_definition(body)
    partitions = _partition_count(body, broker.settings.default_partitions)
    existing = broker.topics.get(name)
    if existing is not None:
        _check_redeclaration(broker, existing, wanted, partitions if "partitions" in body else None)
        return web.json_response(views.exchange_detail(broker.exchanges.describe(name)))
    broker.create_topic(name, partitions, wanted.topic_configs())
    location = request.app.router["exchange"].url_for(name=name)
    return web.json_response(
        views.exchange_detail(broker.exchanges.describe(name)),
        status=201,
        headers={"Location": str(location)},
    )


async def get_exchange(request: web.Request) -> web.Response:
    exchanges = request.app[BROKER].exchanges
    return web.json_response(views.exchange_detail(exchanges.describe(_exchange(request))))


async def delete_exchange(request: web.Request) -> web.Response:
    broker, name = request.app[BROKER], _exchange(request)
    if _flag(request, "if_unused"):
        # RabbitMQ's rule: bindings leaving the exchange make it used; those reaching it
        # do not (they go with it).
        leaving = broker.exchanges.router.bindings(name)
        if leaving:
            raise ApiError(
                409,
                EXCHANGE_IN_USE,
                f"exchange {name!r} is in use: it is the source of {len(leaving)} binding(s)",
            )
    broker.delete_topic(name)  # unbinds what led to it too, in the definitions log
    await broker.exchanges.definitions_durable()
    return web.Response(status=204)


async def list_bindings(request: web.Request) -> web.Response:
    broker, name = request.app[BROKER], _exchange(request)
    bindings = broker.exchanges.router.bindings(name)
    return web.json_response(
        {"exchange": name, "bindings": [views.binding_document(b) for b in bindings]}
    )


async def bind(request: web.Request) -> web.Response:
    broker, name = request.app[BROKER], _exchange(request)
    wanted = _binding_fields(await _json_object(request, _BINDING_FIELDS))
    binding, created = broker.exchanges.bind(
        name,
        wanted.destination,
        key=wanted.key,
        arguments=wanted.arguments,
        expression=wanted.expression,
    )
    # Also when it existed: a concurrent request may have made it and not be durable yet.
    await broker.exchanges.definitions_durable()
    return web.json_response(views.binding_document(binding), status=201 if created else 200)


async def unbind(request: web.Request) -> web.Response:
    broker, name = request.app[BROKER], _exchange(request)
    wanted = _binding_fields(await _json_object(request, _BINDING_FIELDS))
    found = broker.exchanges.find_binding(
        name,
        wanted.destination,
        key=wanted.key,
        arguments=wanted.arguments,
        expression=wanted.expression,
    )
    if found is None or not broker.exchanges.unbind(found):
        raise ApiError(
            404, BINDING_NOT_FOUND, f"exchange {name!r} has no binding with these fields"
        )
    await broker.exchanges.definitions_durable()
    return web.Response(status=204)


async def replay(request: web.Request) -> web.Response:
    """Re-route a range of the exchange's log into one of its bindings (see
    `Exchanges.replay`); answers when done, yielding to other work after each batch."""
    broker, name = request.app[BROKER], _exchange(request)
    body = await _json_object(request, _REPLAY_FIELDS)
    wanted = _binding_fields({k: v for k, v in body.items() if k in _BINDING_FIELDS})
    binding = broker.exchanges.find_binding(
        name,
        wanted.destination,
        key=wanted.key,
        arguments=wanted.arguments,
        expression=wanted.expression,
    )
    if binding is None:
        raise ApiError(
            404, BINDING_NOT_FOUND, f"exchange {name!r} has no binding with these fields"
        )
    timestamp = body.get("from_timestamp_ms")
    if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
        raise ApiError(400, INVALID_REQUEST, "'from_timestamp_ms' must be an integer")
    ranges = broker.exchanges.replay_ranges(
        binding,
        from_offsets=_offsets(body, "from_offsets"),
        from_timestamp_ms=timestamp,
        to_offsets=_offsets(body, "to_offsets"),
    )
    progress = (0, 0)
    for progress in broker.exchanges.replay(binding, ranges):  # noqa: B007 (used after)
        await asyncio.sleep(0)  # one source batch at a time: others are served in between
    return web.json_response(
        {
            "exchange": name,
            "binding": views.binding_document(binding),
            "ranges": [
                {"partition": p, "start_offset": start, "end_offset": end}
                for p, (start, end) in sorted(ranges.items())
            ],
            "records_read": progress[0],
            "records_routed": progress[1],
        }
    )


def _offsets(body: dict[str, object], name: str) -> dict[int, int] | None:
    """`{"0": 12, "1": 40}`: offsets by partition number."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and _DIGITS.fullmatch(k) and len(k) <= _PARTITION_DIGITS_MAX
        and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):  # fmt: skip
        raise ApiError(
            400, INVALID_REQUEST, f"{name!r} must map partition numbers to offsets (>= 0)"
        )
    return {int(k): int(v) for k, v in value.items()}


async def get_openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI_JSON], content_type="application/json")


async def get_metrics(request: web.Request) -> web.Response:
    body, content_type = exposition(request.app[REGISTRY], request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


# --- reading requests -----------------------------------------------------------------------


def _group_id(request: web.Request) -> str:
    """The group id in the path, which need not name a group that exists (see the module
    docstring); it must be text, as the configs file stores it."""
    group_id = request.match_info["group"]
    _check_unicode(group_id)
    return group_id


def _exchange(request: web.Request) -> str:
    """The exchange named in the path; 404 for a plain topic too (the exchange endpoints
    never touch one)."""
    name = request.match_info["name"]
    broker = request.app[BROKER]
    if name not in broker.exchanges.router:
        what = "a topic, not an exchange" if broker.topics.get(name) else "no exchange"
        raise ApiError(404, UNKNOWN_TOPIC_OR_PARTITION, f"{name!r} is {what}")
    return name


@dataclass(frozen=True, slots=True)
class _ExchangeDefinition:
    """What a declaration asks for, beyond the name and the partition count."""

    type: str
    alternate: str | None
    unroutable: str

    def topic_configs(self) -> dict[str, str]:
        """The exchange topic's config overrides (the defaults are left out, as a Kafka
        client creating the topic would leave them out)."""
        found = {configs.EXCHANGE_TYPE: self.type}
        if self.alternate is not None:
            found[configs.EXCHANGE_ALTERNATE] = self.alternate
        if self.unroutable != _UNROUTABLE_DEFAULT:
            found[configs.EXCHANGE_UNROUTABLE] = self.unroutable
        return found


def _exchange_definition(body: dict[str, object]) -> _ExchangeDefinition:
    kind = _string(body, "type")
    if kind not in configs.EXCHANGE_TYPES:
        raise ApiError(
            400, INVALID_REQUEST, f"'type' must be one of {', '.join(configs.EXCHANGE_TYPES)}"
        )
    alternate = body.get("alternate")
    if alternate is not None and (
        not isinstance(alternate, str) or _EXCHANGE_NAME.fullmatch(alternate) is None
    ):
        raise ApiError(
            400,
            INVALID_REQUEST,
            "'alternate' must be null or an exchange name (1 to 249 of [a-zA-Z0-9._-])",
        )
    unroutable = body.get("unroutable", _UNROUTABLE_DEFAULT)
    if unroutable not in _UNROUTABLE_POLICIES:
        raise ApiError(400, INVALID_REQUEST, "'unroutable' must be 'drop' or 'reject'")
    assert isinstance(unroutable, str)
    return _ExchangeDefinition(kind, alternate, unroutable)


def _check_redeclaration(
    broker: Broker, topic: Topic, wanted: _ExchangeDefinition, partitions: int | None
) -> None:
    """Refuse a declaration of an existing name unless it is of that exchange as it is:
    the first field that differs is named with both values, in RabbitMQ's words. The
    partition count is compared only when the declaration gives one."""
    name = topic.name
    if name not in broker.exchanges.router:
        raise ApiError(
            409, TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists and is not an exchange"
        )
    current = broker.exchanges.router.exchange(name)
    compared: list[tuple[str, object, object]] = [
        ("type", str(current.type), wanted.type),
        ("alternate", current.alternate, wanted.alternate),
        ("unroutable", current.unroutable, wanted.unroutable),
    ]
    if partitions is not None:
        compared.append(("partitions", topic.partitions, partitions))
    for field, was, now in compared:
        if was != now:
            raise ApiError(
                409,
                EXCHANGE_CONFLICT,
                f"inequivalent arg {field!r} for exchange {name!r}: "
                f"received {_shown(now)} but current is {_shown(was)}",
            )


def _shown(value: object) -> str:
    return "none" if value is None else repr(value)


@dataclass(frozen=True, slots=True)
class _BindingFields:
    """A binding as a request gives it (its source is the exchange in the path)."""

    destination: str
    key: str
    arguments: dict[str, ArgumentValue]
    expression: str | None


def _binding_fields(body: dict[str, object]) -> _BindingFields:
    """The fields' types; their values are the router's to check (it says what is wrong,
    with the position of a problem in an expression)."""
    destination = _string(body, "destination")
    key = body.get("key", "")
    if not isinstance(key, str):
        raise ApiError(400, INVALID_REQUEST, "'key' must be a string")
    expression = body.get("expression")
    if expression is not None and not isinstance(expression, str):
        raise ApiError(400, INVALID_REQUEST, "'expression' must be a string or null")
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict) or not all(
        value is None or isinstance(value, str | int | float) for value in arguments.values()
    ):
        raise ApiError(
            400,
            INVALID_REQUEST,
            "'arguments' must be an object of string, number, boolean or null values",
        )
    texts = [destination, key, expression or "", *arguments]
    texts += [value for value in arguments.values() if isinstance(value, str)]
    for text in texts:
        _check_unicode(text)
    return _BindingFields(destination, key, arguments, expression)


def _partition_count(body: dict[str, object], default: int) -> int:
    """An integer; its range is the broker's to check (as for CreateTopics)."""
    value = body.get("partitions", default)
    if isinstance(value, bool) or not isinstance(value, int):  # JSON true is not 1
        raise ApiError(400, INVALID_REQUEST, "'partitions' must be an integer")
    return value


def _string_map(body: dict[str, object], key: str) -> dict[str, str]:
    value = body.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ApiError(400, INVALID_REQUEST, f"{key!r} must be an object of string values")
    return value


def _string_list(body: dict[str, object], key: str) -> list[str]:
    value = body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(400, INVALID_REQUEST, f"{key!r} must be an array of strings")
    return value
