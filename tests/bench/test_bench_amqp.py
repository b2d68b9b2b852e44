"""The `amqp` workload's pure parts, with no server: reading the broker's announcement
lines, settling publisher confirms, summarising the runs of two servers, and how the
RabbitMQ node is found and configured. The workload end to end is in test_bench_suite.py;
a real RabbitMQ node in tests/integration/test_rabbitmq_oracle.py."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

import pytest

from weirmq.bench import amqp, rabbitmq, report
from weirmq.bench.target import (
    ADMIN_ANNOUNCEMENT,
    AMQP_ANNOUNCEMENT,
    ANNOUNCE_LINE_BYTES_MAX,
    ANNOUNCEMENT,
    AnnouncementReader,
    parse_announcement,
)

# --- Announcement lines --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("weirmq: accepting Kafka connections on 127.0.0.1:9092", ("kafka", "127.0.0.1:9092")),
        ("weirmq: accepting AMQP connections on 127.0.0.1:5672\n", ("amqp", "127.0.0.1:5672")),
        ("weirmq: accepting AMQP connections on [::1]:41234", ("amqp", "[::1]:41234")),
        ("weirmq: admin API, metrics and console on http://127.0.0.1:9644/ (token for changes "
         "in data/admin-token)",
         ("admin", "http://127.0.0.1:9644")),
        ("weirmq: accepting AMQP connections on 127.0.0.1:5672 (vhost /)",
         ("amqp", "127.0.0.1:5672")),  # a remark after the address is not part of it
        ("weirmq: accepting AMQP connections on ", None),
        ("WARNING something else", None),
        ("  weirmq: accepting AMQP connections on 127.0.0.1:1", None),  # not at the start
    ],
)
def test_an_announcement_line_is_parsed(line: str, expected: tuple[str, str] | None) -> None:
    assert parse_announcement(line) == expected


def test_the_prefixes_are_the_brokers() -> None:
    from weirmq.server import run

    assert AMQP_ANNOUNCEMENT == run.AMQP_ANNOUNCEMENT
    assert ANNOUNCEMENT == "weirmq: accepting Kafka connections on "
    assert ADMIN_ANNOUNCEMENT == "weirmq: admin API, metrics and console on "


def test_lines_are_found_in_pieces_and_the_first_of_a_kind_wins() -> None:
    reader = AnnouncementReader()
    assert reader.feed(b"weirmq: accepting Kafka conn") == []
    assert reader.feed(b"ections on 127.0.0.1:1\nweirmq: admin API, metrics and console on "
                       b"http://127.0.0.1:2\nweirmq: accepting AMQP") == [
        "weirmq: accepting Kafka connections on 127.0.0.1:1",
        "weirmq: admin API, metrics and console on http://127.0.0.1:2"]
    assert "amqp" not in reader.found  # a line without its newline is not complete yet
    reader.feed(b" connections on 127.0.0.1:3\nweirmq: accepting AMQP connections on x:4\n")
    assert reader.found == {"kafka": "127.0.0.1:1", "admin": "http://127.0.0.1:2",
                            "amqp": "127.0.0.1:3"}
    assert len(reader.lines) == 4


def test_an_endless_line_is_dropped_not_kept() -> None:
    reader = AnnouncementReader()
    reader.feed(b"x" * (ANNOUNCE_LINE_BYTES_MAX + 1))
    reader.feed(b"x" * ANNOUNCE_LINE_BYTES_MAX)  # still the same line: nothing kept
    assert reader.lines == [] and reader._partial == b""
    # Its tail is not a line of its own, even if it looks like an announcement.
    reader.feed(b"weirmq: accepting AMQP connections on 127.0.0.1:3\nweirmq: accepting ")
    assert reader.found == {} and reader.lines == []
    reader.feed(b"AMQP connections on 127.0.0.1:4\n")
    assert reader.found == {"amqp": "127.0.0.1:4"}


def test_reading_a_pipe_stops_when_found_at_eof_or_at_the_deadline() -> None:
    read_fd, write_fd = os.pipe()
    try:
        reader = AnnouncementReader()
        os.write(write_fd, b"weirmq: accepting Kafka connections on 127.0.0.1:1\n")
        assert reader.read_until(read_fd, ["kafka"], time.monotonic() + 5)
        started = time.monotonic()
        assert not reader.read_until(read_fd, ["amqp"], started + 0.2)  # silence
        assert 0.15 < time.monotonic() - started < 5
        os.write(write_fd, b"weirmq: accepting AMQP connections on 127.0.0.1:2\n")
        assert reader.read_until(read_fd, ["kafka", "amqp"], time.monotonic() + 5)
        os.close(write_fd)
        write_fd = -1
        assert not reader.read_until(read_fd, ["admin"], time.monotonic() + 5)  # EOF
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


# --- Publisher confirms ----------------------------------------------------------------------


def test_confirms_settle_single_multiple_and_out_of_order_tags() -> None:
    unconfirmed = collections.deque(range(1, 11))
    assert amqp._settle(unconfirmed, 1, multiple=False) == 1
    assert amqp._settle(unconfirmed, 4, multiple=True) == 3  # 2, 3, 4
    assert amqp._settle(unconfirmed, 7, multiple=False) == 1  # out of order
    assert list(unconfirmed) == [5, 6, 8, 9, 10]
    assert amqp._settle(unconfirmed, 9, multiple=True) == 4  # 5, 6, 8, 9
    assert amqp._settle(unconfirmed, 7, multiple=False) == 0  # settled already
    assert amqp._settle(unconfirmed, 10, multiple=False) == 1
    assert not unconfirmed
    assert amqp._settle(unconfirmed, 11, multiple=True) == 0


# --- Summary of two servers' runs ------------------------------------------------------------


def _figures(rate: float) -> dict[str, Any]:
    return {"messages_per_s": rate, "broker_cpu_percent": 50.0, "client_cpu_percent": [20.0]}


def _round(each: float, window: float, consume: float) -> dict[str, dict[str, Any]]:
    return {amqp.PUBLISH_EACH: _figures(each), amqp.PUBLISH_WINDOW: _figures(window),
            amqp.CONSUME: _figures(consume)}


def test_both_servers_measured_give_medians_and_the_ratio() -> None:
    runs = {amqp.WEIRMQ: [_round(900, 20_000, 30_000), _round(1000, 18_000, 10_000),
                          _round(1100, 22_000, 20_000)],
            amqp.RABBITMQ: [_round(400, 8_000, 9_000), _round(500, 9_000, 8_000),
                            _round(450, 10_000, 7_000)]}
    cases = amqp.summarise(runs, {}, {})
    assert [c["name"] for c in cases] == [f"{m}: {s}" for m in amqp.MEASUREMENTS
                                          for s in amqp.SERVERS]
    weirmq_each, rabbit_each = cases[0], cases[1]
    assert weirmq_each["messages_per_s"] == 1000
    assert weirmq_each["messages_per_s_runs"] == [900, 1000, 1100]
    assert rabbit_each["messages_per_s"] == 450
    assert weirmq_each["ratio_to_rabbitmq"] == pytest.approx(1000 / 450)
    assert "ratio_to_rabbitmq" not in rabbit_each
    assert cases[4]["messages_per_s"] == 20_000 and cases[5]["messages_per_s"] == 8_000
    assert cases[4]["server"] == amqp.WEIRMQ and cases[4]["measurement"] == amqp.CONSUME


def test_an_even_number_of_runs_reports_a_real_run_not_a_mean() -> None:
    runs = {amqp.WEIRMQ: [_round(100, 1, 1), _round(300, 1, 1)], amqp.RABBITMQ: []}
    [weirmq_each, _, *_] = amqp.summarise(runs, {}, {})
    assert weirmq_each["messages_per_s"] == 100  # the lower middle, one run's figures


def test_a_failed_server_fails_its_cases_and_the_other_is_still_reported() -> None:
    error = "ClientFailed: no AMQP listener"
    runs = {amqp.WEIRMQ: [_round(1, 1, 1)], amqp.RABBITMQ: [_round(400, 8_000, 9_000)]}
    cases = amqp.summarise(runs, {amqp.WEIRMQ: error}, {})
    weirmq = [c for c in cases if c["name"].endswith(amqp.WEIRMQ)]
    rabbit = [c for c in cases if c["name"].endswith(amqp.RABBITMQ)]
    # Failed in a later round: the earlier round's figures are not reported.
    assert [c.get("error") for c in weirmq] == [error] * 3
    assert all("messages_per_s" in c and "ratio_to_rabbitmq" not in c for c in rabbit)


def test_a_skipped_server_is_skipped_not_failed() -> None:
    reason = "RabbitMQ is not installed"
    cases = amqp.summarise({amqp.WEIRMQ: [_round(1, 2, 3)]}, {}, {amqp.RABBITMQ: reason})
    assert [c.get("skipped") for c in cases if amqp.RABBITMQ in c["name"]] == [reason] * 3
    assert all("ratio_to_rabbitmq" not in c for c in cases)


def test_the_servers_alternate_which_goes_first() -> None:
    assert [amqp.server_order(r)[0] for r in range(4)] == [
        amqp.WEIRMQ, amqp.RABBITMQ, amqp.WEIRMQ, amqp.RABBITMQ]
    assert sorted(amqp.server_order(1)) == sorted(amqp.SERVERS)


def test_the_amqp_url_names_the_default_vhost() -> None:
    assert amqp.amqp_url("127.0.0.1:5672") == "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert amqp.amqp_url("[::1]:5672", "u", "p") == "amqp://u:p@[::1]:5672/%2F"


def test_a_run_with_a_failed_server_renders() -> None:
    cases = amqp.summarise({amqp.RABBITMQ: [_round(400, 8_000, 9_000)]},
                           {amqp.WEIRMQ: "RuntimeError: no AMQP listener"}, {})
    document = {"workloads": {"amqp": {"description": "d", "params": {}, "cases": cases}},
                "targets": []}
    text = report.render(document)
    assert "÷ RabbitMQ" in text and "8,000" in text
    assert f"{amqp.CONSUME}: {amqp.WEIRMQ}: FAILED: RuntimeError: no AMQP listener" in text


# --- The RabbitMQ node's set-up ----------------------------------------------------------------


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_debian_wrapper_is_followed_to_the_packages_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package_bin, sbin = tmp_path / "lib-bin", tmp_path / "sbin"
    package_bin.mkdir()
    sbin.mkdir()
    wrapper = _executable(package_bin / rabbitmq.DEBIAN_WRAPPER)
    script = _executable(package_bin / "rabbitmq-server")
    (sbin / "rabbitmq-server").symlink_to(wrapper)
    _executable(sbin / "epmd")
    monkeypatch.setenv("PATH", str(sbin))
    assert rabbitmq.server_script() == script.resolve()
    assert rabbitmq.not_installed_reason() is None


def test_a_plain_script_on_the_path_is_used_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _executable(tmp_path / "rabbitmq-server")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rabbitmq.server_script() == script.resolve()
    assert "epmd" in str(rabbitmq.not_installed_reason())  # no Erlang beside it


def test_without_the_package_the_reason_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rabbitmq.server_script() is None
    assert "Debian package rabbitmq-server" in str(rabbitmq.not_installed_reason())
    node = rabbitmq.RabbitNode(tmp_path)
    with pytest.raises(rabbitmq.RabbitMQNotInstalled):
        node.start()
    assert not node.directory.exists() and node.process_ids == {}


def test_the_node_environment_is_ours_alone(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "RABBITMQ_NODENAME": "rabbit@elsewhere", "ERL_EPMD_PORT": "4369",
            "RABBITMQ_CONFIG_FILE": "/etc/x", "NOTIFY_SOCKET": "/run/systemd/notify",
            "LANG": "C.UTF-8"}
    env = rabbitmq.node_environment(base, tmp_path, node_name="n@localhost", amqp_port=1,
                                    dist_port=2, epmd_port=3)
    assert env["PATH"] == "/bin" and env["LANG"] == "C.UTF-8" and "NOTIFY_SOCKET" not in env
    assert env["HOME"] == str(tmp_path) and env["RABBITMQ_NODENAME"] == "n@localhost"
    assert (env["RABBITMQ_NODE_PORT"], env["RABBITMQ_DIST_PORT"], env["ERL_EPMD_PORT"]) == (
        "1", "2", "3")
    ours = {k: v for k, v in env.items() if k.startswith(("RABBITMQ_", "ERL_"))}
    for key in ("RABBITMQ_CONFIG_FILE", "RABBITMQ_CONF_ENV_FILE", "RABBITMQ_MNESIA_BASE",
                "RABBITMQ_LOG_BASE", "RABBITMQ_ENABLED_PLUGINS_FILE", "RABBITMQ_PID_FILE",
                "RABBITMQ_ADVANCED_CONFIG_FILE"):
        assert Path(ours[key]).parent == tmp_path, key
    assert rabbitmq.config_text(1) == "listeners.tcp.default = 127.0.0.1:1\n"


def test_free_ports_are_distinct() -> None:
    ports = rabbitmq.free_ports(3)
    assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)
