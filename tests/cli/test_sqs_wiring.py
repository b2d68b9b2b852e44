"""The SQS API's wiring: its port bound at start and announced, its code loaded on the
first connection (`weirmq.cli.services.DeferredSqsService`), a port clash named with its
setting, ``weirmq serve --sqs-listen`` and ``weirmq.testing.Broker(sqs=True)``.

The SQS API itself (`weirmq.protocols.sqs.http`) is not what is tested here: the services
are pointed at a stand-in module written by the test (`STAND_IN`), an aiohttp server with
`SqsService`'s shape that echoes what it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from weirmq import testing
from weirmq.admin.deferred import DeferredAdminService
from weirmq.broker.core import Broker
from weirmq.cli.services import (
    SQS_ANNOUNCEMENT,
    DeferredSqsService,
    ServicePort,
    http_services,
)
from weirmq.server.startup import StartupError
from weirmq.settings import Settings

TIMEOUT_S = 30.0
STAND_IN_MODULE = "sqs_stand_in_http"
STAND_IN = """
from aiohttp import web


class SqsService:
    def __init__(self, settings):
        self.settings = settings
        self._runner = None

    async def start(self, broker, sockets):
        async def echo(request):
            body = await request.text()
            return web.json_response({"region": self.settings.sqs_region, "body": body})

        app = web.Application()
        app.router.add_post("/", echo)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        for sock in sockets:
            await web.SockSite(self._runner, sock).start()

    async def stop(self):
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The stand-in module, importable; DeferredSqsService loads it instead of the real one."""
    (tmp_path / f"{STAND_IN_MODULE}.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(DeferredSqsService, "module_name", STAND_IN_MODULE)
    yield STAND_IN_MODULE
    sys.modules.pop(STAND_IN_MODULE, None)


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(Settings(data_dir=tmp_path / "data"))
    yield broker
    broker.close()


def sqs(tmp_path: Path, sqs_listen: str | None = "127.0.0.1:0", **kwargs: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", sqs_listen=sqs_listen, **kwargs)


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def post(url: str, body: bytes) -> dict[str, Any]:
    """POST with the standard library on a worker thread (the broker's loop keeps going)."""

    def blocking() -> dict[str, Any]:
        request = urllib.request.Request(url, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    return await asyncio.to_thread(blocking)


async def refused(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


# --- the deferred service -----------------------------------------------------------------------


def test_the_sqs_port_opens_at_start_and_the_first_connection_loads_the_api(
    core: Broker, tmp_path: Path, stand_in: str
) -> None:
    service = DeferredSqsService(sqs(tmp_path, sqs_region="eu-west-3"))

    async def scenario() -> None:
        line = await service.start(core)
        host, port = service.address
        assert (host, port > 0) == ("127.0.0.1", True)
        assert line == f"weirmq: accepting SQS requests on http://127.0.0.1:{port}"
        assert line == SQS_ANNOUNCEMENT + service.url
        await asyncio.sleep(0.05)
        assert service.service is None  # nobody asked yet: nothing loaded
        answers = await asyncio.gather(*(post(service.url + "/", b"%d" % n) for n in range(4)))
        assert [a["body"] for a in answers] == ["0", "1", "2", "3"]  # each one answered
        assert {a["region"] for a in answers} == {"eu-west-3"}  # built from the settings
        assert type(service.service).__module__ == stand_in
        await service.stop()
        await service.stop()  # idempotent
        assert await refused(port)

    run(scenario())


def test_an_ipv6_address_is_announced_in_brackets(core: Broker, tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    service = DeferredSqsService(sqs(tmp_path, "[::1]:0"))

    async def scenario() -> None:
        try:
            line = await service.start(core)
        except OSError as exc:  # IPv6 compiled in, but no ::1 here
            pytest.skip(f"cannot bind [::1]: {exc}")
        try:
            assert line == f"{SQS_ANNOUNCEMENT}http://[::1]:{service.address[1]}"
        finally:
            await service.stop()

    run(scenario())


def test_a_taken_sqs_port_fails_the_start_naming_its_setting(core: Broker, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        port = ServicePort(DeferredSqsService(sqs(tmp_path, address)))

        async def scenario() -> None:
            with pytest.raises(StartupError) as caught:
                await port.start(core)
            await port.stop()  # what serve() does after a failed start
            assert str(caught.value) == (
                f"the SQS API address {address} is already in use (another broker on this "
                "machine?); choose a free one with setting 'sqs_listen': --sqs-listen, "
                "WEIRMQ_SQS_LISTEN or the config file"
            )

        run(scenario())


def test_an_sqs_api_that_cannot_load_is_logged_and_its_port_closed(
    core: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = DeferredSqsService(sqs(tmp_path))
    service.module_name = "weirmq.no_such_sqs_module"

    async def scenario() -> None:
        await service.start(core)
        port = service.address[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):  # closed, never answered
            assert await reader.read() == b""
        writer.close()
        assert await refused(port)
        await service.stop()

    with caplog.at_level(logging.ERROR, logger="weirmq.admin.deferred"):
        run(scenario())
    assert "the SQS API could not start; closing its port" in caplog.text


def test_loading_at_start_raises_what_loading_raised_and_closes_the_port(
    core: Broker, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = DeferredSqsService(sqs(tmp_path, f"127.0.0.1:{port}"), load_at_start=True)
    service.module_name = "weirmq.no_such_sqs_module"

    async def scenario() -> None:
        with pytest.raises(ModuleNotFoundError, match="no_such_sqs_module"):
            await service.start(core)
        assert await refused(port)  # bound, then closed
        await service.stop()

    run(scenario())


def test_an_sqs_service_that_is_off_refuses_to_start(core: Broker, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sqs_listen is off"):
        asyncio.run(DeferredSqsService(sqs(tmp_path, None)).start(core))


def test_serve_runs_the_admin_api_then_the_sqs_api_each_unless_off(tmp_path: Path) -> None:
    def kinds(**settings: Any) -> list[type]:
        built = http_services(Settings(data_dir=tmp_path, **settings))
        return [type(port.service) for port in built]

    assert kinds() == [DeferredAdminService, DeferredSqsService]  # the announcement order
    assert kinds(admin_listen=None) == [DeferredSqsService]
    assert kinds(sqs_listen=None) == [DeferredAdminService]
    assert kinds(admin_listen=None, sqs_listen=None) == []


# --- weirmq.testing -----------------------------------------------------------------------------


def test_the_in_process_broker_runs_the_sqs_api_only_when_asked(stand_in: str) -> None:
    with testing.Broker() as broker:
        assert broker.sqs_endpoint is None
        assert broker.broker.settings.sqs_listen is None  # never 9324 in a test
    with testing.Broker(sqs=True, sqs_region="ap-south-1") as broker:
        endpoint = broker.sqs_endpoint
        assert endpoint is not None and re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoint)
        request = urllib.request.Request(endpoint + "/", data=b"hello", method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            assert json.loads(response.read()) == {"region": "ap-south-1", "body": "hello"}
    assert broker.sqs_endpoint is None  # stopped


def test_the_in_process_broker_fails_to_start_when_the_sqs_api_cannot_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(DeferredSqsService, "module_name", "weirmq.no_such_sqs_module")
    with pytest.raises(ModuleNotFoundError, match="no_such_sqs_module"):
        testing.Broker(sqs=True).start()


# --- weirmq serve -------------------------------------------------------------------------------


def serve(tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    env["WEIRMQ_AMQP_LISTEN"] = "127.0.0.1:0"  # never RabbitMQ's 5672 in tests
    command = [sys.executable, "-m", "weirmq", "serve", "--listen", "127.0.0.1:0"]
    command += ["--data-dir", str(tmp_path / "data"), *flags]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_serve_announces_the_sqs_api_after_the_admin_api_and_before_amqp(
    tmp_path: Path,
) -> None:
    process = serve(tmp_path, "--admin-listen", "127.0.0.1:0", "--sqs-listen", "127.0.0.1:0")
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline().strip() for _ in range(4)]
        kafka, admin, sqs_line, amqp = lines
        assert kafka.startswith("weirmq: accepting Kafka connections on 127.0.0.1:"), lines
        assert admin.startswith("weirmq: admin API, metrics and console on http://127.0.0.1:")
        assert re.fullmatch(r"weirmq: accepting SQS requests on http://127\.0\.0\.1:\d+", sqs_line)
        assert amqp.startswith("weirmq: accepting AMQP connections on 127.0.0.1:"), lines
        port = int(sqs_line.rpartition(":")[2])
        assert port != 9324
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S):
            pass  # the port is open (what answers is the SQS API's business)
    finally:
        process.terminate()
        _out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, err


def test_serve_with_the_sqs_api_off_announces_no_sqs_line(tmp_path: Path) -> None:
    process = serve(tmp_path, "--admin-listen", "off", "--sqs-listen", "off")
    try:
        assert process.stdout is not None
        kafka, amqp = process.stdout.readline(), process.stdout.readline()
        assert kafka.startswith("weirmq: accepting Kafka connections on ")
        assert amqp.startswith("weirmq: accepting AMQP connections on ")  # right after
    finally:
        process.terminate()
        process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0


def test_serve_names_the_setting_of_a_taken_sqs_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        process = serve(tmp_path, "--admin-listen", "off", "--sqs-listen", address)
        out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 1
    assert "accepting" not in out  # no line at all: the start failed
    assert "Traceback" not in err
    assert (
        f"weirmq serve: cannot start: the SQS API address {address} is already in use "
        "(another broker on this machine?); choose a free one with setting 'sqs_listen': "
        "--sqs-listen, WEIRMQ_SQS_LISTEN or the config file"
    ) in err.splitlines()


def test_serve_refuses_a_bad_sqs_address_by_name(tmp_path: Path) -> None:
    process = serve(tmp_path, "--sqs-listen", "9324")
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2  # a usage error, before anything is opened or bound
    assert out == ""
    assert err.startswith("weirmq serve: setting 'sqs_listen' from command-line flag --sqs-listen")
