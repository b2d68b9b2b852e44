"""The SQS API over HTTP: aiohttp on the broker's loop, both of SQS's protocols.

Theory of operation
-------------------
`SqsService` is loaded on the first connection to ``sqs_listen`` (the deferred service of
`weirmq serve`, like the admin API: aiohttp costs nothing to a broker nobody asks over
HTTP). It makes the SQS model (queues found again in the topics' configs) and serves every
request at any path:

- **AWS JSON 1.0** (botocore since 2023, and every current AWS SDK): a POST with header
  ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON body; the answer is JSON. An error is
  ``{"__type": "com.amazonaws.sqs#<Type>", "message": ...}`` with the header
  ``x-amzn-query-error: <legacy code>;Sender``, from which botocore raises the legacy code
  (errors.py).
- **Query** (older SDKs, other languages): ``Action=...`` form fields in a POST body or a
  GET's query string; the answer is XML (query.py translates both ways, so the actions see
  one shape). The queue may be named by the path (``POST /<account>/<name>``).

A request is signed with SigV4 by every SDK. With no ``sqs_access_keys`` configured the
signature is not checked (any credentials work, as with local emulators) and the access
key it names is the sender's id; with keys configured it must verify against one of them
(sigv4.py), else 403 with SQS's error.

Queue URLs are made from the scheme and Host the client used, so a client that reached
the broker as ``localhost:9324`` gets URLs it can reach again.

Bounds: connections (`sqs_connections_max`; a connection past it is closed at once),
idle keep-alive connections (`sqs_idle_timeout_ms`), one request's body
(`sqs_request_bytes_max`: RequestEntityTooLarge), the request bodies held at once
(`queued_max_request_bytes`, shared by every SQS connection: a request waits to be read
until there is room), and long polls waiting at once (`sqs_long_polls_max`, api.py).
A client's mistake gets SQS's error; only a bug of ours answers 500, logged with its
traceback.

Housekeeping every `housekeeping_interval_ms` moves each queue's log start past the
messages it has deleted (model.py's `trim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl

from aiohttp import web

from ...settings import Settings
from .api import ACTIONS, Caller, SqsApi
from .errors import Fault, SqsError
from .model import SqsModel
from .query import decode_query, encode_query_error, encode_query_result
from .sigv4 import verify_sigv4

if TYPE_CHECKING:
    from ...broker.core import Broker
    from ...broker.stats import BrokerStats

log = logging.getLogger(__name__)

TARGET_PREFIX: Final = "AmazonSQS."
JSON_CONTENT_TYPE: Final = "application/x-amz-json-1.0"
XML_CONTENT_TYPE: Final = "text/xml"
JSON_ERROR_PREFIX: Final = "com.amazonaws.sqs#"
_CREDENTIAL: Final = re.compile(r"Credential=([^/,\s]+)/")


class SqsService:
    """The SQS API of one broker; a `weirmq.server.run.Service` (through the deferred
    loader). See the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.api: SqsApi | None = None
        self._runner: web.AppRunner | None = None
        self._servers: list[asyncio.Server] = []
        self._housekeeping: asyncio.Task[None] | None = None
        self._memory = _Budget(settings.queued_max_request_bytes)
        self._stats: BrokerStats | None = None

    async def start(self, broker: Broker, sockets: Sequence[socket.socket]) -> None:
        settings = self.settings
        model = SqsModel(broker, region=settings.sqs_region, account_id=settings.sqs_account_id)
        api = self.api = SqsApi(
            broker,
            model,
            message_bytes_max=settings.sqs_message_bytes_max,
            long_polls_max=settings.sqs_long_polls_max,
        )
        for queue in model.queues():
            if queue.fifo:
                api.rebuild_fifo(queue)
        app = web.Application(client_max_size=settings.sqs_request_bytes_max)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=settings.sqs_idle_timeout_ms / 1000,
            shutdown_timeout=settings.shutdown_timeout_ms / 1000,
        )
        await runner.setup()
        server = runner.server
        assert server is not None
        limit = settings.sqs_connections_max
        loop = asyncio.get_running_loop()

        def factory() -> asyncio.BaseProtocol:
            if len(server.connections) >= limit:
                return _Refused()
            return server()

        for sock in sockets:
            self._servers.append(await loop.create_server(factory, sock=sock))
        # Read by the admin API's connection counts (`BrokerStats.connections_by_protocol`).
        self._stats = broker.stats
        broker.stats.connection_gauges["sqs"] = lambda: len(server.connections)
        self._housekeeping = loop.create_task(self._keep(model))

    async def stop(self) -> None:
        if self._stats is not None:
            self._stats.connection_gauges.pop("sqs", None)
        housekeeping, self._housekeeping = self._housekeeping, None
        if housekeeping is not None:
            housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await housekeeping
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.shutdown()
            await runner.cleanup()

    async def _keep(self, model: SqsModel) -> None:
        interval = self.settings.housekeeping_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                model.trim()
            except Exception:
                log.exception("SQS housekeeping failed")

    # --- one request ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        request_id = str(uuid.uuid4())
        json_protocol = "X-Amz-Target" in request.headers
        try:
            size = request.content_length or 0
            if size > self.settings.sqs_request_bytes_max:
                raise _too_large(size, self.settings.sqs_request_bytes_max)
            async with self._memory.hold(size):
                return await self._serve(request, request_id, json_protocol)
        except SqsError as error:
            return _error(error, request_id, json_protocol=json_protocol)
        except web.HTTPRequestEntityTooLarge as exc:
            too_large = SqsError(Fault.REQUEST_TOO_LARGE, str(exc.text or exc.reason))
            return _error(too_large, request_id, json_protocol=json_protocol)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("SQS request failed")
            bug = SqsError(Fault.INTERNAL, "We encountered an internal error. Please try again.")
            return _error(bug, request_id, json_protocol=json_protocol)

    async def _serve(
        self, request: web.Request, request_id: str, json_protocol: bool
    ) -> web.StreamResponse:
        api = self.api
        assert api is not None
        body = await request.read()
        query = parse_qsl(request.query_string, keep_blank_values=True)
        access_key = self._authenticate(request, query, body)
        base = f"{request.scheme}://{request.host}"
        if json_protocol:
            target = request.headers["X-Amz-Target"]
            action = target[len(TARGET_PREFIX) :] if target.startswith(TARGET_PREFIX) else ""
            if action not in ACTIONS:
                raise SqsError(
                    Fault.UNKNOWN_OPERATION, f"The action {action or target} is not valid."
                )
            try:
                params = json.loads(body) if body.strip() else {}
            except ValueError as exc:
                raise SqsError(Fault.SERIALIZATION, f"The body is not JSON: {exc}") from None
            if not isinstance(params, dict):
                raise SqsError(Fault.SERIALIZATION, "The body must be a JSON object.")
        else:
            fields = list(query)
            if body and request.method == "POST":
                try:
                    text = body.decode()
                except UnicodeDecodeError:
                    raise SqsError(Fault.SERIALIZATION, "The form body is not UTF-8.") from None
                fields += parse_qsl(text, keep_blank_values=True)
            action, params = decode_query(fields)
            path = request.path.strip("/")
            if "QueueUrl" not in params and path.count("/") == 1:
                params["QueueUrl"] = f"{base}/{path}"
        peer = request.remote or ""
        caller = Caller(base, access_key, peer)
        result = await api.call(action, params, caller)
        if json_protocol:
            return web.Response(
                body=json.dumps(result, separators=(",", ":")).encode(),
                content_type=JSON_CONTENT_TYPE,
                headers={"x-amzn-RequestId": request_id},
            )
        return web.Response(
            body=encode_query_result(action, result, request_id),
            content_type=XML_CONTENT_TYPE,
            headers={"x-amzn-RequestId": request_id},
        )

    def _authenticate(
        self, request: web.Request, query: Sequence[tuple[str, str]], body: bytes
    ) -> str:
        """The access key the request names; checked against the configured keys when
        there are any (see the module docstring)."""
        secrets = dict(self.settings.sqs_access_keys)
        if secrets:
            headers = {k.lower(): v for k, v in request.headers.items()}
            return verify_sigv4(
                request.method,
                request.raw_path.split("?", 1)[0],
                query,
                headers,
                body,
                secrets,
                time.time(),
                self.settings.sqs_region,
            )
        found = _CREDENTIAL.search(request.headers.get("Authorization", ""))
        if found is None:
            found = _CREDENTIAL.search("Credential=" + dict(query).get("X-Amz-Credential", ""))
        return found.group(1)[:128] if found else ""


def _error(error: SqsError, request_id: str, *, json_protocol: bool) -> web.Response:
    fault = error.fault
    if fault is Fault.INTERNAL:
        pass
    elif fault.status >= 500:
        log.warning("SQS request refused: %s", error.message)
    headers = {"x-amzn-RequestId": request_id}
    if json_protocol:
        headers["x-amzn-query-error"] = (
            f"{fault.legacy_code};{'Sender' if fault.sender else 'Receiver'}"
        )
        document: dict[str, Any] = {
            "__type": JSON_ERROR_PREFIX + fault.json_type,
            "message": error.message,
        }
        return web.Response(
            status=fault.status,
            body=json.dumps(document).encode(),
            content_type=JSON_CONTENT_TYPE,
            headers=headers,
        )
    return web.Response(
        status=fault.status,
        body=encode_query_error(fault, error.message, request_id),
        content_type=XML_CONTENT_TYPE,
        headers=headers,
    )


def _too_large(size: int, limit: int) -> SqsError:
    return SqsError(
        Fault.REQUEST_TOO_LARGE,
        f"The request body of {size} bytes is larger than the {limit} bytes allowed.",
    )


class _Refused(asyncio.Protocol):
    """A connection past `sqs_connections_max`: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Budget:
    """Request bodies held at once, in bytes; a request waits for room (see the module
    docstring). A body larger than the whole budget waits for the budget to be empty."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._room = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> Any:
        if size:
            async with self._room:
                await self._room.wait_for(lambda: self.used == 0 or self.used + size <= self.limit)
                self.used += size
        try:
            yield
        finally:
            if size:
                async with self._room:
                    self.used -= size
                    self._room.notify_all()
