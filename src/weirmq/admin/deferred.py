"""HTTP services whose port is open from the start and whose code loads on the first
connection to it: the admin API (`DeferredAdminService`), and the SQS API, which the CLI
builds on the same `DeferredService` (`weirmq.cli.services`).

Theory of operation
-------------------
aiohttp, prometheus_client and the admin application cost ~16 MB of a broker's ~50 MB
idle RSS and ~0.15 s of CPU to import (measured on these machines), and a broker that
nobody asks over HTTP never needs them; the SQS API needs aiohttp too. So
`DeferredService.start` only binds and listens on the address of its setting (for the
admin API, ``settings.admin_listen``), as aiohttp would (every address the host resolves
to, ``SO_REUSEADDR``, IPv6 sockets IPv6-only, a backlog of 128), and returns the line
announcing the URL. From then on the kernel completes connections into the listen
backlog, so a client connects at once. The first one makes a listening socket readable;
the service then imports its module (`DeferredService.module_name`) on a worker thread
(the loop keeps serving Kafka clients meanwhile) and hands the listening sockets to the
real service found there (`DeferredService.class_name`: `AdminService`, `SqsService`),
whose aiohttp server accepts the connections waiting in the backlog, and every later one.
Their requests wait meanwhile. The first request is answered ~0.15 s later than it would
be by a server started eagerly (measured); later ones are not.

The real service is anything shaped like `LoadedService`: built from the `Settings`,
started with the broker and the listening sockets, stopped. That is all this module
knows of it, which is what lets one mechanism serve both APIs.

What stays as with an eager start: a port that is taken or an address that cannot be
bound fails `start` (and so the broker's start-up) with the same `OSError`; the
announcement names the bound address; `stop` closes the port, whether or not the real
service was ever loaded. If loading fails (it should not: aiohttp is a dependency), the
error is logged and the port closed, so clients are refused rather than left waiting.
`load_at_start=True` loads at once instead (`weirmq.testing`, where a test would rather
see a broken service fail the broker's start than its first request).

Why the mechanism lives in `admin/`: the services that use it are built by the CLI and by
`weirmq.testing`, which may import anything, and by nothing else; `admin/` may not import
`server/` (ARCHITECTURE.md), so this is the one place where the admin API can share it.

This module imports only the standard library, `weirmq.settings` and `weirmq.admin.token`
(the same), and so must stay.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from weirmq.settings import Settings, parse_host_port

from .history import History, Sampler
from .token import SETTING_SOURCE, AdminToken, load_or_create

if TYPE_CHECKING:
    from weirmq.admin.http import AdminService
    from weirmq.broker.core import Broker

log = logging.getLogger(__name__)

ADMIN_ANNOUNCEMENT = "weirmq: admin API, metrics and console on "
"""The admin line up to its URL; the URL is followed by where the token is."""
LISTEN_BACKLOG = 128
"""aiohttp's own default for its sites."""


class LoadedService(Protocol):
    """What a deferred service loads: ``cls(settings)``, then `start` and `stop`."""

    async def start(self, broker: Broker, sockets: list[socket.socket]) -> object:
        """Serve on `sockets` (bound and listening already); what it returns is unused."""
        ...

    async def stop(self) -> None:
        """Stop serving and let go of the sockets (idempotent)."""
        ...


ServiceT = TypeVar("ServiceT", bound=LoadedService)


class DeferredService(Generic[ServiceT]):
    """A service's port, bound at `start`; the service itself loaded on the first
    connection (see the module docstring). A `weirmq.server.run.Service`.

    A subclass names what it defers, in five class attributes: `setting`, `what`,
    `module_name`, `class_name` and `announcement`.
    """

    setting: ClassVar[str]
    """The `Settings` field holding the listen address (None: off), e.g. "admin_listen"."""
    what: ClassVar[str]
    """The service in messages: "admin API" ("the admin API could not start")."""
    module_name: str
    """Where the service class is loaded from (a test points it elsewhere)."""
    class_name: ClassVar[str]
    """The service class in that module, built as ``cls(settings)``."""
    announcement: ClassVar[str]
    """The announcement line up to its URL, which follows it: "weirmq: accepting SQS
    requests on " (the line is then "... on http://HOST:PORT", maybe with a remark after
    the URL: see `announce`)."""

    def __init__(self, settings: Settings, *, load_at_start: bool = False) -> None:
        self.settings = settings
        self.load_at_start = load_at_start
        """Load the service during `start` rather than on the first connection."""
        self._sockets: list[socket.socket] = []
        self._watched: list[int] = []  # file descriptors with our reader on the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loading: asyncio.Task[None] | None = None
        self.service: ServiceT | None = None
        """The real service, once the first connection has loaded it."""

    @property
    def listen(self) -> str | None:
        """The setting's value: HOST:PORT to bind, or None when the service is off."""
        value = getattr(self.settings, self.setting)
        assert value is None or isinstance(value, str), f"{self.setting} is not an address"
        return value

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) bound first; the port is the real one when 0 was asked for."""
        if not self._sockets:
            raise RuntimeError(f"the {self.what} has not started")
        host, port = self._sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of `address` (an IPv6 host in brackets)."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def start(self, broker: Broker) -> str:
        """Bind and listen; returns the line announcing where. Raises `OSError` as an
        eager start would (address in use, cannot be resolved or bound); with
        `load_at_start`, also what loading raised (the port closed)."""
        listen_address = self.listen
        if listen_address is None:
            raise ValueError(f"{self.setting} is off; there is nothing to start")
        host, port = parse_host_port(listen_address)
        self._loop = loop = asyncio.get_running_loop()
        self._sockets = await listen(loop, host, port)
        try:
            line = self.announce(self.url)
        except BaseException:
            self._close_sockets()
            raise
        if self.load_at_start:
            await self._load(broker)
            return line
        for sock in self._sockets:
            loop.add_reader(sock.fileno(), self._first_connection, broker)
            self._watched.append(sock.fileno())
        return line

    async def stop(self) -> None:
        """Stop serving and close the port (idempotent; also after a failed start)."""
        self._unwatch()
        loading, self._loading = self._loading, None
        if loading is not None and not loading.done():
            loading.cancel()
            await asyncio.wait({loading})
        service, self.service = self.service, None
        if service is not None:
            await service.stop()
        self._close_sockets()

    def announce(self, url: str) -> str:
        """The line announcing the service at `url`: `announcement` and the URL."""
        return self.announcement + url

    def _first_connection(self, broker: Broker) -> None:
        self._unwatch()
        assert self._loop is not None and self._loading is None
        name = self.what.lower().replace(" ", "-") + "-load"
        self._loading = self._loop.create_task(self._load_logged(broker), name=name)

    async def _load_logged(self, broker: Broker) -> None:
        try:
            await self._load(broker)
        except Exception:  # nobody awaits this task: the log is where it goes
            log.exception("the %s could not start; closing its port", self.what)

    async def _load(self, broker: Broker) -> None:
        """Import the module, build the service, serve on our sockets. On failure the port
        is closed (clients are refused, not left waiting) and the error raised."""
        try:
            module: Any = await asyncio.to_thread(importlib.import_module, self.module_name)
            self.service = self._build(getattr(module, self.class_name))
            await self.service.start(broker, sockets=self._sockets)
        except Exception:
            service, self.service = self.service, None
            if service is not None:  # started half way: its server lets go of the sockets
                await service.stop()
            self._close_sockets()
            raise

    def _build(self, cls: Any) -> ServiceT:
        """The real service, made of its class (a subclass may hand it more)."""
        service: ServiceT = cls(self.settings)
        return service

    def _unwatch(self) -> None:
        watched, self._watched = self._watched, []
        if self._loop is not None and not self._loop.is_closed():
            for fd in watched:
                self._loop.remove_reader(fd)

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()  # a no-op for those aiohttp's server has closed already


class DeferredAdminService(DeferredService["AdminService"]):
    """`weirmq.admin.http.AdminService`, loaded on the first connection to
    ``settings.admin_listen``; see the module docstring."""

    setting = "admin_listen"
    what = "admin API"
    module_name = "weirmq.admin.http"
    class_name = "AdminService"
    announcement = ADMIN_ANNOUNCEMENT
    service: AdminService | None

    def __init__(self, settings: Settings, *, load_at_start: bool = False) -> None:
        super().__init__(settings, load_at_start=load_at_start)
        self._sampler: Sampler | None = None

    def announce(self, url: str) -> str:
        """The URL, and where the token for changes is (made now if it must be, so the
        file named exists before anyone reads the line)."""
        return admin_announcement(url, load_or_create(self.settings))

    async def start(self, broker: Broker) -> str:
        """As every deferred service, and the traffic history's sampler starts now, so
        the console's graphs cover the minutes before its first visit
        (`weirmq.admin.history`)."""
        from . import views  # the broker's modules only: loaded already, no aiohttp

        history = History()
        self._sampler = Sampler(history, lambda: (broker.clock(), views.totals(broker)))
        self._sampler.start()
        try:
            return await super().start(broker)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await super().stop()
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            await sampler.stop()

    def _build(self, cls: Any) -> AdminService:
        service: AdminService = cls(self.settings)
        if self._sampler is not None:
            service.history = self._sampler.history
        return service


def admin_announcement(url: str, token: AdminToken) -> str:
    """``weirmq: admin API, metrics and console on URL (token for changes in PATH)``: the
    URL is the first word after the prefix, as scripts read it."""
    where = f"in {token.source}" if token.source != SETTING_SOURCE else f"from {token.source}"
    return f"{ADMIN_ANNOUNCEMENT}{url} (token for changes {where})"


async def listen(
    loop: asyncio.AbstractEventLoop, host: str, port: int, backlog: int = LISTEN_BACKLOG
) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address `host` resolves to, bound as
    asyncio's `create_server` binds them (which is what aiohttp's sites call)."""
    try:  # an address needs no resolver, and so no executor thread (asyncio does the same)
        infos = socket.getaddrinfo(
            host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
            socket.AI_PASSIVE | socket.AI_NUMERICHOST,
        )  # fmt: skip
    except socket.gaierror:  # a name: resolve it off the loop
        infos = await loop.getaddrinfo(
            host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned an empty list")
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _canonical, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host cannot open (as asyncio: skip it)
                continue
            sockets.append(sock)
            _bind(sock, family, address)
            sock.listen(backlog)
            sock.setblocking(False)
        if not sockets:
            raise OSError(f"no address of {host!r} could be opened")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind(sock: socket.socket, family: int, address: tuple[Any, ...]) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
    if family == socket.AF_INET6:  # as asyncio: an IPv6 socket does not take IPv4 too
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
    try:
        sock.bind(address)
    except OSError as exc:  # asyncio's wording, which names the address
        raise OSError(
            exc.errno,
            f"error while attempting to bind on address {address!r}: "
            f"{(exc.strerror or str(exc)).lower()}",
        ) from None
