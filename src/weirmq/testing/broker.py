"""A real WeirMQ broker inside the current process, for tests (ours and our users').

Theory of operation
-------------------
`Broker()` runs exactly what `weirmq serve` runs (`weirmq.server.run.serve`: the same
listener, dispatcher, storage and optional HTTP admin service) on a thread of its own,
with its own asyncio event loop, so the caller's code (synchronous tests, or an asyncio
test on another loop) talks to it over loopback TCP like any Kafka client would. Nothing
is mocked: a test that passes against it passes against a broker process.

- The Kafka listener binds 127.0.0.1 port 0, so the kernel picks a free port; no two
  brokers (or test runs) ever race for one. The data directory is a fresh temporary
  directory unless one is given, removed at `stop()`.
- `start()` returns once the listener (and the admin API, when asked for) accepts
  connections; an error while starting (a bad setting, an unwritable directory) is raised
  in the caller's thread, not lost on the broker's.
- `stop()` is the orderly stop of `weirmq serve` (in-flight requests finish, logs are
  flushed, the shutdown marked clean), then the thread is joined. A broker left running
  at interpreter exit dies with its daemon thread.

The HTTP admin API is off by default: it costs ~300 ms of imports that most tests do not
need. `Broker(admin=True)` turns it on (on a free port, see `admin_url`; the token its
changes need is `admin_token`). The AMQP 0-9-1 listener is off by default too, so that
a test broker never takes RabbitMQ's port 5672 (`weirmq serve`'s default);
`Broker(amqp=True)` turns it on, on a free port (see `amqp_address`, read from the line
the broker announces it with). The SQS API is off by
default for the same reasons (aiohttp's imports, and `weirmq serve`'s port 9324);
`Broker(sqs=True)` turns it on, on a free port (see `sqs_endpoint`, the endpoint URL for
an AWS SDK). It is the service `weirmq serve` runs (`weirmq.cli.services`), loaded at
start rather than on the first connection, so that an SQS API that cannot load fails
`start()` instead of a test's first request.

Start-up time is mostly imports, paid once per process: ~220 ms for the broker's modules
(kio's message classes are most of it), then a few milliseconds per broker. kio registers
hypothesis strategies for its types at import whenever hypothesis can be imported, which
costs another ~110 ms; a broker never needs them, so when neither kio nor hypothesis is
imported yet, hypothesis is hidden while the broker's modules load and then put back
(`_import_serve`). A process that imported kio or hypothesis before is left as it is.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class Broker:
    """A broker on its own thread and loop; see the module docstring.

    `settings` are `weirmq.broker.settings.Settings` fields (`default_partitions=3`,
    `auto_create_topics=False`, ...). Use it as a context manager, or call `start()` and
    `stop()`.
    """

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        admin: bool = False,
        amqp: bool = False,
        sqs: bool = False,
        **settings: Any,
    ) -> None:
        self._own_data_dir = data_dir is None
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._admin = admin
        self._amqp = amqp
        self._amqp_address: str | None = None
        self._sqs = sqs
        self._sqs_endpoint: str | None = None
        self._overrides = settings
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._core: Any = None
        self._admin_service: Any = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> Broker:
        """Start serving; returns once clients can connect. Raises what stopped the start."""
        if self._thread is not None:
            raise RuntimeError("this Broker was already started; create a new one")
        from weirmq.settings import Settings  # imported late: keeps the plugin cheap

        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="weirmq-test-"))
        settings = Settings(
            **{
                "listen": "127.0.0.1:0",
                "admin_listen": "127.0.0.1:0" if self._admin else None,
                "amqp_listen": "127.0.0.1:0" if self._amqp else None,
                "sqs_listen": "127.0.0.1:0" if self._sqs else None,
                "data_dir": self._data_dir,
                **self._overrides,
            }
        )
        self._thread = threading.Thread(
            target=self._run, args=(settings,), name="weirmq-test-broker", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise RuntimeError(f"the broker did not start within {START_TIMEOUT_S:.0f} s")
        if self._error is not None:
            self._thread.join(STOP_TIMEOUT_S)
            self._cleanup()
            raise self._error
        return self

    def stop(self) -> None:
        """Orderly stop (idempotent); removes the temporary data directory."""
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None and thread.is_alive():
            loop.call_soon_threadsafe(stop_event.set)
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(f"the broker did not stop within {STOP_TIMEOUT_S:.0f} s")
        self._cleanup()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what tests use -----------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT``, for a client's ``bootstrap.servers``."""
        host, port = self.broker.advertised
        return f"{host}:{port}"

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the HTTP admin API (needs ``Broker(admin=True)``)."""
        if self._admin_service is None:
            raise RuntimeError("the admin API is off; use Broker(admin=True)")
        host, port = self._admin_service.address
        return f"http://{host}:{port}"

    @property
    def admin_token(self) -> str:
        """The admin API's token, for ``Authorization: Bearer`` on changes (needs
        ``Broker(admin=True)``): the ``admin_token`` setting when given, else the one the
        broker made in its data directory."""
        if self._admin_service is None or self._admin_service.token is None:
            raise RuntimeError("the admin API is off; use Broker(admin=True)")
        token: str = self._admin_service.token.value
        return token

    @property
    def amqp_address(self) -> str:
        """``127.0.0.1:PORT`` of the AMQP 0-9-1 listener (needs ``Broker(amqp=True)``)."""
        if self._amqp_address is None:
            raise RuntimeError("the AMQP listener is off; use Broker(amqp=True)")
        return self._amqp_address

    @property
    def sqs_endpoint(self) -> str | None:
        """``http://127.0.0.1:PORT`` of the SQS API, an AWS SDK's ``endpoint_url``; None
        unless ``Broker(sqs=True)``."""
        return self._sqs_endpoint

    @property
    def data_dir(self) -> Path:
        assert self._data_dir is not None, "not started"
        return self._data_dir

    @property
    def broker(self) -> Any:
        """The running `weirmq.broker.core.Broker` (touch it only from its own loop, e.g.
        through `call`)."""
        if self._core is None:
            raise RuntimeError("the broker is not running")
        return self._core

    def call(self, function: Any, *args: Any) -> Any:
        """Run `function(*args)` on the broker's loop thread and return its result."""
        assert self._loop is not None, "not started"

        async def run() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(STOP_TIMEOUT_S)

    # --- the broker's thread ------------------------------------------------------------

    def _run(self, settings: Any) -> None:
        try:
            asyncio.run(self._serve(settings))
        except BaseException as exc:  # handed to the caller's thread in start() or stop()
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self, settings: Any) -> None:
        serve = _import_serve()
        from weirmq.server.run import AMQP_ANNOUNCEMENT

        services = []
        if settings.admin_listen is not None:
            from weirmq.admin.http import AdminService

            self._admin_service = AdminService(settings)
            services.append(self._admin_service)
        sqs_service = None
        if settings.sqs_listen is not None:  # after the admin API, as `weirmq serve` has it
            from weirmq.cli.services import DeferredSqsService

            sqs_service = DeferredSqsService(settings, load_at_start=True)
            services.append(sqs_service)
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()

        def ready(core: Any) -> None:
            self._core = core
            if sqs_service is not None:
                self._sqs_endpoint = sqs_service.url
            self._ready.set()

        def announce(line: str) -> None:
            # The announce lines are for people and supervisors; a test has the addresses,
            # and the AMQP one only from its line (the listener is run's own).
            if line.startswith(AMQP_ANNOUNCEMENT):
                self._amqp_address = line.removeprefix(AMQP_ANNOUNCEMENT)

        await serve(
            settings, announce=announce, stop=self._stop_event, services=services, ready=ready
        )

    def _cleanup(self) -> None:
        self._core = None
        self._amqp_address = None
        self._sqs_endpoint = None
        if self._own_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)


def _import_serve() -> Any:
    """`weirmq.server.run.serve`, imported without kio's hypothesis hooks when possible
    (see the module docstring)."""
    hide = "kio" not in sys.modules and "hypothesis" not in sys.modules
    if hide:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import now fails
    try:
        from weirmq.server.run import serve
    finally:
        if hide and sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]
    return serve
