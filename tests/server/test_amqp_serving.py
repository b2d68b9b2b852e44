"""How `weirmq serve` builds and drives its AMQP listener, without sockets.

The settings become the AMQP offer (`amqp_config`); the listener gets its own idle timeout
and the Kafka listener's request memory budget (`AmqpServer`); the broker's publish
refusal (free disk below the floor) reaches the adapter as a flow signal once per change
(`PublishBlock`), driven by `ResourceGuard.disk` with made-up measurements.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from weirmq.broker.core import Broker
from weirmq.protocols.amqp import AmqpConfig
from weirmq.protocols.amqp.serve import amqp_adapter, amqp_config
from weirmq.protocols.kafka.dispatch import Dispatcher
from weirmq.server.listener import AmqpServer, KafkaServer
from weirmq.server.run import PublishBlock
from weirmq.settings import Settings
from weirmq.testing import ManualTimers

MIB = 1024 * 1024


def test_default_settings_offer_the_connection_layers_defaults() -> None:
    assert amqp_config(Settings()) == AmqpConfig()


def test_every_amqp_setting_reaches_the_offer() -> None:
    settings = Settings(
        amqp_users=(("app", "s3cret"), ("ops", "x")),
        amqp_loopback_users=("ops",),
        amqp_vhosts=("/", "staging"),
        amqp_channel_max=16,
        amqp_frame_max_bytes=8192,
        amqp_heartbeat_s=0,
        amqp_handshake_timeout_ms=500,
        amqp_message_bytes_max=1024,
    )
    config = amqp_config(settings)
    assert dict(config.users) == {"app": "s3cret", "ops": "x"}
    assert config.loopback_users == frozenset({"ops"})
    assert config.vhosts == frozenset({"/", "staging"})
    assert (config.channel_max, config.frame_max_bytes, config.heartbeat_s) == (16, 8192, 0)
    assert (config.handshake_timeout_ms, config.message_bytes_max) == (500, 1024)


class Signal:
    def __init__(self) -> None:
        self.calls: list[tuple[bool, str]] = []

    def flow(self, blocked: bool, reason: str = "") -> None:
        self.calls.append((blocked, reason))


def test_the_flow_signal_is_given_on_changes_only() -> None:
    signal = Signal()
    block = PublishBlock(signal)
    block.update(None)
    assert signal.calls == [] and not block.blocked
    block.update("free disk space is below disk_free_min_bytes (100 bytes)")
    block.update("free disk space is below disk_free_min_bytes (100 bytes)")
    assert signal.calls == [
        (True, "low on disk: free disk space is below disk_free_min_bytes (100 bytes)")
    ]
    assert block.blocked
    block.update(None)
    block.update(None)
    assert signal.calls[1:] == [(False, "")]


def test_the_publish_refusal_follows_free_disk_with_its_hysteresis(tmp_path: Path) -> None:
    floor = 100 * MIB
    broker = Broker(Settings(data_dir=tmp_path, disk_free_min_bytes=floor))
    try:
        guard, signal = broker.resources, Signal()
        block = PublishBlock(signal)
        total = 100 * floor
        for free, refused in [
            (total, False),
            (floor + 1, False),  # throttled, not refused
            (floor - 1, True),
            (floor * 5 // 4, True),  # not yet back above 1.5 times the floor
            (floor * 2, False),
        ]:
            guard.disk(total, free)
            assert (guard.publish_refusal is not None) is refused, free
            block.update(guard.publish_refusal)
        assert [blocked for blocked, _ in signal.calls] == [True, False]
        assert "disk_free_min_bytes" in signal.calls[0][1]
    finally:
        broker.close()


def test_the_amqp_listener_has_its_own_idle_timeout_and_shares_the_budget(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        settings = Settings(data_dir=tmp_path, idle_timeout_ms=1000, amqp_idle_timeout_ms=0)
        broker = Broker(settings)
        try:
            kafka = KafkaServer(Dispatcher(broker), settings)
            amqp = AmqpServer(broker, settings, ManualTimers(), kafka.memory)
            assert amqp.memory is kafka.memory
            assert amqp.idle_timeout_ms == 0 and kafka.idle_timeout_ms == 1000
            assert amqp.adapter is amqp.amqp and amqp.adapter.name == "amqp"
            assert amqp.stats is broker.stats  # counted with the broker's connections
            alone = AmqpServer(broker, Settings(data_dir=tmp_path), ManualTimers())
            assert alone.memory is not kafka.memory
        finally:
            broker.close()

    asyncio.run(scenario())


def test_amqp_adapter_runs_on_the_brokers_clock_and_the_given_timers(tmp_path: Path) -> None:
    broker = Broker(Settings(data_dir=tmp_path))
    try:
        timers = ManualTimers()
        adapter = amqp_adapter(broker, broker.settings, timers)
        assert adapter.clock is broker.clock and adapter.timers is timers
        assert adapter.config == amqp_config(broker.settings)
    finally:
        broker.close()


@pytest.mark.parametrize("idle_timeout_ms", [0, 30_000])
def test_amqp_idle_timeout_reaches_the_listener(tmp_path: Path, idle_timeout_ms: int) -> None:
    async def scenario() -> None:
        settings = Settings(data_dir=tmp_path, amqp_idle_timeout_ms=idle_timeout_ms)
        broker = Broker(settings)
        try:
            amqp = AmqpServer(broker, settings, ManualTimers())
            assert amqp.idle_timeout_ms == idle_timeout_ms
            expected_s = idle_timeout_ms / 1000 if idle_timeout_ms else float("inf")
            assert amqp.idle_timeout_s == expected_s
        finally:
            broker.close()

    asyncio.run(scenario())
