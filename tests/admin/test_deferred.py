"""`DeferredAdminService`: the admin port open from the start, aiohttp loaded on the first
connection (what ``weirmq serve`` runs; see weirmq/admin/deferred.py).

This process has imported aiohttp long ago, so "not loaded" is checked on the service
(`service.service` stays None until a connection comes); that a fresh ``weirmq serve``
does not import aiohttp is checked in a fresh interpreter (tests/cli/test_startup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from weirmq.admin import deferred as deferred_module
from weirmq.admin.deferred import DeferredAdminService, listen
from weirmq.admin.history import History
from weirmq.broker.core import Broker
from weirmq.settings import Settings
from weirmq.testing import ManualClock

TIMEOUT_S = 30.0


def deferred(tmp_path: Path, admin_listen: str | None = "127.0.0.1:0") -> DeferredAdminService:
    return DeferredAdminService(Settings(data_dir=tmp_path / "data", admin_listen=admin_listen))


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def refused(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


def test_the_port_opens_at_once_and_the_first_connection_loads_the_api(
    broker: Broker, tmp_path: Path
) -> None:
    service = deferred(tmp_path)
    with pytest.raises(RuntimeError):
        service.address  # noqa: B018 (not bound yet)

    async def scenario() -> None:
        line = await service.start(broker)
        host, port = service.address
        assert host == "127.0.0.1" and port > 0
        token_file = tmp_path / "data" / "admin-token"
        assert line == (
            f"weirmq: admin API, metrics and console on http://127.0.0.1:{port} "
            f"(token for changes in {token_file})"
        )
        assert token_file.stat().st_mode & 0o777 == 0o600  # made before the line is read
        await asyncio.sleep(0.05)
        assert service.service is None  # nobody asked yet: nothing loaded
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/api/v1/health") as response:
                assert response.status == 200
                assert (await response.json())["status"] == "ok"
            assert service.service is not None
            for _ in range(3):  # and on, as a scraper would
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    assert response.status == 200
                    assert "weirmq_broker_info" in await response.text()
        await service.stop()
        await service.stop()  # idempotent
        assert await refused(port)

    run(scenario())


def test_the_traffic_history_is_sampled_from_the_start_not_from_the_first_visit(
    broker: Broker, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short interval, so that samples come while the test waits a fraction of a second.
    monkeypatch.setattr(deferred_module, "History", functools.partial(History, interval_ms=20))
    service = deferred(tmp_path)

    async def scenario() -> None:
        await service.start(broker)
        for _ in range(5):  # the broker's clock moves on while nobody has asked yet
            clock.advance(1_000)
            await asyncio.sleep(0.05)
        assert service.service is None
        token = (tmp_path / "data" / "admin-token").read_text().strip()
        url = f"http://127.0.0.1:{service.address[1]}/api/v1/overview"
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
            assert answer.status == 200
            samples = (await answer.json())["history"]["samples"]
        # The first visit finds the minutes before it in the graphs.
        assert len(samples) >= 3, samples
        await service.stop()

    run(scenario())


def test_connections_waiting_while_it_loads_are_all_answered(
    broker: Broker, tmp_path: Path
) -> None:
    service = deferred(tmp_path)

    async def scenario() -> None:
        await service.start(broker)
        url = f"http://127.0.0.1:{service.address[1]}/api/v1/broker"

        async def get() -> int:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                return response.status

        assert await asyncio.gather(*(get() for _ in range(8))) == [200] * 8
        await service.stop()

    run(scenario())


def test_stop_before_any_connection_closes_the_port(broker: Broker, tmp_path: Path) -> None:
    service = deferred(tmp_path)

    async def scenario() -> None:
        await service.start(broker)
        port = service.address[1]
        await service.stop()
        assert service.service is None
        assert await refused(port)

    run(scenario())


def test_a_taken_port_fails_the_start_as_an_eager_start_would(
    broker: Broker, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = deferred(tmp_path, f"127.0.0.1:{port}")

        async def scenario() -> None:
            with pytest.raises(OSError, match=f"bind on address .*{port}.*in use"):
                await service.start(broker)
            await service.stop()  # what serve() does after a failed start

        run(scenario())


def test_a_service_that_is_off_refuses_to_start(broker: Broker, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="off"):
        asyncio.run(deferred(tmp_path, None).start(broker))


def test_a_load_that_fails_is_logged_and_closes_the_port(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = deferred(tmp_path)
    service.module_name = "weirmq.admin.no_such_module"

    async def scenario() -> None:
        await service.start(broker)
        port = service.address[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # in the backlog
        writer.write(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):  # closed, never answered
            assert await reader.read() == b""
        writer.close()
        assert await refused(port)
        await service.stop()

    with caplog.at_level(logging.ERROR, logger="weirmq.admin.deferred"):
        run(scenario())
    assert "the admin API could not start" in caplog.text


def test_stop_while_loading_closes_the_port(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for weirmq.admin.http that takes its time to import.
    (tmp_path / "slow_admin_http.py").write_text(
        "import time\ntime.sleep(0.5)\nfrom weirmq.admin.http import AdminService\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    service = deferred(tmp_path)
    service.module_name = "slow_admin_http"

    async def scenario() -> None:
        await service.start(broker)
        port = service.address[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)  # the load has begun
        await service.stop()
        writer.close()
        assert service.service is None
        assert await refused(port)

    try:
        run(scenario())
    finally:
        sys.modules.pop("slow_admin_http", None)


def test_every_address_of_a_name_is_bound() -> None:
    async def scenario() -> list[tuple[int, str]]:
        sockets = await listen(asyncio.get_running_loop(), "localhost", 0)
        try:
            return [(s.family, s.getsockname()[0]) for s in sockets]
        finally:
            for sock in sockets:
                sock.close()

    bound = asyncio.run(scenario())
    expected = {
        (info[0], info[4][0])
        for info in socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)
    }
    assert set(bound) <= expected and bound
