"""The `sqs` workload: its pure parts with no server (sharing a round among clients, summing
rounds, the ratios, the targets and the table), and its --quick run end to end against a
real broker, the same broker's AMQP and moto's server. As everywhere in the benchmark's
tests, no timing is asserted: only that every figure is there and the ratios are right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.bench import report
from weirmq.bench import sqs as bench_sqs
from weirmq.bench.target import SQS_ANNOUNCEMENT, parse_announcement

# --- Announcement ----------------------------------------------------------------------------


def test_the_sqs_line_is_the_brokers_and_gives_its_url() -> None:
    from weirmq.cli.services import SQS_ANNOUNCEMENT as BROKERS

    assert SQS_ANNOUNCEMENT == BROKERS
    assert parse_announcement(f"{SQS_ANNOUNCEMENT}http://127.0.0.1:9324/\n") == (
        "sqs",
        "http://127.0.0.1:9324",
    )
    assert parse_announcement(f"{SQS_ANNOUNCEMENT}http://[::1]:1 (remark)") == (
        "sqs",
        "http://[::1]:1",
    )
    assert parse_announcement(SQS_ANNOUNCEMENT) is None


# --- Sharing a round, the plan ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "parts", "expected"),
    [
        (1000, 8, [130, 130, 130, 130, 120, 120, 120, 120]),
        (200, 8, [30, 30, 30, 30, 20, 20, 20, 20]),
        (25, 4, [10, 10, 5, 0]),  # the half batch goes to the first share with fewer
        (5, 3, [5, 0, 0]),
        (0, 2, [0, 0]),
    ],
)
def test_a_round_is_shared_in_whole_batches(total: int, parts: int, expected: list[int]) -> None:
    assert bench_sqs.split(total, parts) == expected


@given(st.integers(0, 100_000), st.integers(1, 32), st.integers(1, 10))
def test_shares_add_up_and_differ_by_a_batch_at_most(total: int, parts: int, unit: int) -> None:
    shares = bench_sqs.split(total, parts, unit)
    assert len(shares) == parts and sum(shares) == total
    whole = [s // unit for s in shares]
    assert max(whole) - min(whole) <= 1
    assert sum(s % unit != 0 for s in shares) <= 1


def test_quick_is_small_and_full_is_the_issues_depths() -> None:
    quick, full = bench_sqs.plan(True), bench_sqs.plan(False)
    assert full.depths == (1_000, 100_000) and full.moto_depth == 1_000
    assert full.moto_fill_depth is not None and full.moto_fill_depth > full.moto_depth
    assert max(quick.depths) <= 2_000 and quick.moto_fill_depth is None
    for p in (quick, full):
        assert list(p.depths) == sorted(p.depths) and p.messages % bench_sqs.BATCH == 0
        assert p.phase_s_max > 0 and p.moto_phase_s_max > 0
    # Every phase is bounded: the whole of moto fits in a few minutes.
    assert full.moto_prefill_s_max + 2 * full.moto_phase_s_max + full.moto_fill_s_max <= 240


def test_a_body_is_text_of_the_size_asked() -> None:
    body = bench_sqs.message_body(1024)
    assert len(body.encode()) == 1024 and body.isascii()
    assert bench_sqs.message_body(1024) != body
    assert len(bench_sqs.message_body(7)) == 7


def test_case_names() -> None:
    assert bench_sqs.case_name("WeirMQ", "send", 100_000) == (
        "SendMessageBatch x10: WeirMQ at 100,000"
    )
    assert bench_sqs.case_name("moto", "receive", 1_000) == (
        "ReceiveMessage x10 + DeleteMessageBatch: moto at 1,000"
    )
    assert bench_sqs.case_name("moto", "fill", 1_000, 20_000) == (
        "SendMessageBatch x10 fill: moto from 1,000 toward 20,000"
    )
    assert bench_sqs.case_name("WeirMQ", "consume, ack each, prefetch 100") == (
        "AMQP consume, ack each, prefetch 100: WeirMQ"
    )
    assert bench_sqs.case_name("WeirMQ", "receive", 1_000, client="light") == (
        "ReceiveMessage x10 + DeleteMessageBatch (light client): WeirMQ at 1,000"
    )
    names = bench_sqs.case_names(bench_sqs.plan(False))
    assert len(names["WeirMQ"]) == 8 and len(names["amqp"]) == 3 and len(names["moto"]) == 3
    assert len(bench_sqs.case_names(bench_sqs.plan(True))["moto"]) == 2


def test_an_external_broker_skips_every_case(tmp_path: Path) -> None:
    document = bench_sqs.workload(tmp_path, True, lambda _: None, skip="external")
    assert len(document["cases"]) == 13
    assert all(c["skipped"] == "external" for c in document["cases"])


# --- The light client's requests --------------------------------------------------------------


def _botocore(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    import botocore.serialize  # type: ignore[import-untyped]
    import botocore.session  # type: ignore[import-untyped]

    model = botocore.session.get_session().get_service_model("sqs")
    assert model.metadata["protocol"] == "json"  # botocore >= 1.31.57 speaks JSON to SQS
    serializer = botocore.serialize.create_serializer("json")
    request: dict[str, Any] = serializer.serialize_to_request(
        params, model.operation_model(operation)
    )
    return request


@pytest.mark.parametrize(
    ("operation", "params"),
    [
        ("SendMessageBatch", bench_sqs.send_params("http://h:1/1/q", ["a" * 1024, "b"])),
        ("ReceiveMessage", bench_sqs.receive_params("http://h:1/1/q", 10)),
        ("DeleteMessageBatch", bench_sqs.delete_params("http://h:1/1/q", ["r0", "r1", "r2"])),
    ],
)
def test_the_light_clients_requests_are_botocores(operation: str, params: dict[str, Any]) -> None:
    headers, body = bench_sqs.json_request(operation, params)
    request = _botocore(operation, params)
    assert body == request["body"]  # byte for byte
    assert headers["X-Amz-Target"] == request["headers"]["X-Amz-Target"]
    assert headers["Content-Type"] == request["headers"]["Content-Type"]
    assert request["url_path"] == "/" and request["method"] == "POST"
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=bench/")


def test_the_light_clients_parameters_are_what_the_workload_asks() -> None:
    send = bench_sqs.send_params("u", ["x"] * 3)
    assert send == {
        "QueueUrl": "u",
        "Entries": [{"Id": str(i), "MessageBody": "x"} for i in range(3)],
    }
    assert bench_sqs.receive_params("u", 10) == {
        "QueueUrl": "u",
        "MaxNumberOfMessages": 10,
        "WaitTimeSeconds": bench_sqs.WAIT_S,
    }
    assert bench_sqs.delete_params("u", ["h"])["Entries"] == [{"Id": "0", "ReceiptHandle": "h"}]


# --- Summing rounds --------------------------------------------------------------------------


class FakeWindow:
    def __init__(self, seconds: float, cpu_s: float | None, rss: int | None) -> None:
        self.seconds, self.cpu_s, self.peak_rss_bytes = seconds, cpu_s, rss


def _result(
    messages: int, cpu_s: float, calls: list[int], deletes: list[int] | None = None
) -> dict[str, Any]:
    result = {
        "messages": messages,
        "seconds": 1.0,
        "client_cpu_s": cpu_s,
        "calls_us": array("q", calls),
        "value_bytes": messages * 1024,
    }
    if deletes is not None:
        result |= {"deletes_us": array("q", deletes), "empty_receives": 1}
    return result


def test_a_phase_sums_its_rounds() -> None:
    phase = bench_sqs.Phase()
    assert (
        phase.add(
            FakeWindow(1.0, 0.5, 50_000_000),
            [
                _result(100, 0.2, [1000] * 10, [2000] * 10),
                _result(100, 0.4, [3000] * 10, [4000] * 10),
            ],
        )
        == 200
    )
    assert (
        phase.add(
            FakeWindow(3.0, 1.5, 60_000_000),
            [_result(300, 0.2, [5000] * 30, [6000] * 30), _result(0, 0.0, [], [])],
        )
        == 300
    )
    figures = phase.figures()
    assert figures["messages"] == 500 and figures["rounds"] == 2
    assert figures["seconds"] == 4.0 and figures["messages_per_s"] == 125.0
    assert figures["mb_per_s"] == pytest.approx(500 * 1024 / 1e6 / 4)
    assert figures["calls"] == 50 and figures["empty_receives"] == 4
    assert figures["call_p50_ms"] == 5.0 and figures["call_p99_ms"] == 5.0
    assert figures["delete_p50_ms"] == 6.0
    assert figures["broker_cpu_s"] == 2.0 and figures["broker_cpu_percent"] == 50.0
    assert figures["broker_cpu_us_per_message"] == 4000.0
    assert figures["messages_per_broker_cpu_s"] == 250.0
    assert figures["broker_peak_rss_mb"] == 60.0
    assert figures["client_cpu_percent"] == pytest.approx([10.0, 10.0])  # per client
    assert figures["client_cpu_us_per_message"] == pytest.approx(0.8e6 / 500)


def test_a_server_whose_cpu_is_not_visible_has_none() -> None:
    phase = bench_sqs.Phase()
    phase.add(FakeWindow(1.0, None, None), [_result(10, 0.1, [1000])])
    figures = phase.figures()
    assert figures["broker_cpu_s"] is figures["broker_cpu_percent"] is None
    assert figures["messages_per_broker_cpu_s"] is None and figures["delete_p50_ms"] is None


class FakePool:
    """Moves what it is asked to, or `short` less on the `short_at`-th call."""

    size = 2

    def __init__(self, short_at: int | None = None, short: int = 0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.short_at, self.short = short_at, short

    def run(self, kind: str, queue_url: str, messages: int, time_s: float) -> list[Any]:
        assert queue_url == "url" and time_s > 0
        self.calls.append((kind, messages))
        if len(self.calls) == self.short_at:
            messages -= self.short
        return [
            _result(n, 0.01, [1000] * (n // 10), [] if kind == "receive" else None)
            for n in bench_sqs.split(messages, self.size)
        ]


def test_rounds_alternate_and_receive_what_was_sent() -> None:
    pool = FakePool()
    send, receive = bench_sqs.measure_depth(pool, None, "url", 2_500, 1_000, 60)  # type: ignore[arg-type]
    assert pool.calls == [("send", 1000), ("receive", 1000)] * 2 + [("send", 500), ("receive", 500)]
    assert send.messages == receive.messages == 2_500 and send.rounds == receive.rounds == 3
    assert send.figures()["broker_cpu_s"] is None  # no process to watch


def test_a_round_cut_short_by_time_ends_the_phase() -> None:
    pool = FakePool(short_at=3, short=300)  # the second send moves 700 of 1,000
    send, receive = bench_sqs.measure_depth(pool, None, "url", 5_000, 1_000, 60)  # type: ignore[arg-type]
    assert pool.calls == [("send", 1000), ("receive", 1000), ("send", 1000), ("receive", 700)]
    assert send.messages == receive.messages == 1_700


@pytest.mark.integration
def test_a_client_that_cannot_connect_fails_the_pool_with_its_error() -> None:
    from weirmq.bench.rabbitmq import free_ports
    from weirmq.bench.workers import ClientFailed

    [port] = free_ports(1)  # nothing listens there
    with pytest.raises(ClientFailed, match=r"sqs-client-0: .*Could not connect"):
        bench_sqs.ClientPool(f"http://127.0.0.1:{port}", 1)
    with pytest.raises(ClientFailed, match=r"sqs-light-client-0: .*Cannot connect"):
        bench_sqs.ClientPool(f"http://127.0.0.1:{port}", 1, concurrency=2)


# --- Ratios ----------------------------------------------------------------------------------


def _sqs(
    server: str,
    phase: str,
    depth: int,
    rate: float,
    per_cpu: float = 1000.0,
    client: str = "boto3",
) -> dict[str, Any]:
    return {
        "name": bench_sqs.case_name(server, phase, depth, client=client),
        "server": server,
        "client": client,
        "api": "SQS",
        "phase": phase,
        "depth": depth,
        "messages_per_s": rate,
        "messages_per_broker_cpu_s": per_cpu,
    }


def _amqp(measurement: str, rate: float, per_cpu: float) -> dict[str, Any]:
    return {
        "name": bench_sqs.case_name("WeirMQ", measurement),
        "server": "WeirMQ",
        "api": "AMQP",
        "phase": measurement,
        "depth": None,
        "messages_per_s": rate,
        "messages_per_broker_cpu_s": per_cpu,
    }


def sample_cases() -> list[dict[str, Any]]:
    return [
        _sqs("WeirMQ", "send", 1_000, 6_000, 10_000),
        _sqs("WeirMQ", "receive", 1_000, 4_000),
        _sqs("WeirMQ", "send", 100_000, 5_400, 9_000),
        _sqs("WeirMQ", "receive", 100_000, 4_400, 5_000),
        _sqs("WeirMQ", "send", 1_000, 12_000, 10_000, client="light"),
        _sqs("WeirMQ", "receive", 1_000, 8_000, client="light"),
        _sqs("WeirMQ", "send", 100_000, 9_600, 9_000, client="light"),
        _sqs("WeirMQ", "receive", 100_000, 8_800, 5_000, client="light"),
        _amqp(bench_sqs.AMQP_SEND_EACH, 1_000, 2_000),
        _amqp(bench_sqs.AMQP_SEND, 12_000, 16_000),
        _amqp(bench_sqs.AMQP_RECEIVE, 16_000, 20_000),
        _sqs("moto", "send", 1_000, 40),
        _sqs("moto", "receive", 1_000, 10),
        {
            "name": "fill",
            "server": "moto",
            "api": "SQS",
            "phase": "fill",
            "depth": 3_000,
            "messages_per_s": 8,
            "depth_reached": 3_000,
        },
    ]


def test_the_ratios_compare_figures_of_the_same_run() -> None:
    cases = {c["name"]: c for c in bench_sqs.add_ratios(sample_cases())}
    send_1k, send_100k = (
        cases["SendMessageBatch x10: WeirMQ at 1,000"],
        cases["SendMessageBatch x10: WeirMQ at 100,000"],
    )
    receive_100k = cases["ReceiveMessage x10 + DeleteMessageBatch: WeirMQ at 100,000"]
    assert "ratio_to_shallow" not in send_1k
    assert send_100k["ratio_to_shallow"] == pytest.approx(0.9)
    assert receive_100k["ratio_to_shallow"] == pytest.approx(1.1)
    assert send_100k["ratio_to_amqp"] == pytest.approx(5_400 / 12_000)
    assert send_100k["ratio_to_amqp_each"] == pytest.approx(5.4)
    assert send_100k["cpu_ratio_to_amqp"] == pytest.approx(9_000 / 16_000)
    assert receive_100k["ratio_to_amqp"] == pytest.approx(4_400 / 16_000)
    assert receive_100k["cpu_ratio_to_amqp"] == pytest.approx(0.25)
    assert "ratio_to_amqp_each" not in receive_100k
    # Against moto at moto's depth only.
    assert send_1k["ratio_to_moto"] == pytest.approx(150)
    assert "ratio_to_moto" not in send_100k
    moto = cases["ReceiveMessage x10 + DeleteMessageBatch: moto at 1,000"]
    assert not {"ratio_to_shallow", "ratio_to_amqp", "ratio_to_moto"} & set(moto)
    assert "ratio_to_shallow" not in cases["fill"]
    # The light client's rows: ÷ its own shallow row, ÷ the same AMQP, never ÷ moto.
    light_send = cases["SendMessageBatch x10 (light client): WeirMQ at 100,000"]
    light_receive = cases[
        "ReceiveMessage x10 + DeleteMessageBatch (light client): WeirMQ at 100,000"
    ]
    assert light_send["ratio_to_shallow"] == pytest.approx(0.8)
    assert light_receive["ratio_to_shallow"] == pytest.approx(1.1)
    assert light_send["ratio_to_amqp"] == pytest.approx(0.8)
    assert light_receive["ratio_to_amqp"] == pytest.approx(0.55)
    assert "ratio_to_moto" not in cases["SendMessageBatch x10 (light client): WeirMQ at 1,000"]


def test_a_case_without_a_client_is_boto3s() -> None:
    old = [{k: v for k, v in c.items() if k != "client"} for c in sample_cases()[:4]]
    cases = {c["name"]: c for c in bench_sqs.add_ratios(old + sample_cases()[4:])}
    assert cases["SendMessageBatch x10: WeirMQ at 100,000"]["ratio_to_shallow"] == pytest.approx(
        0.9
    )


def test_failed_and_skipped_cases_get_no_ratios_and_none_for_what_is_missing() -> None:
    cases = sample_cases()
    cases[0] = {"name": cases[0]["name"], "error": "RuntimeError: boom"}  # WeirMQ send at 1k
    cases[9] = {"name": cases[9]["name"], "error": "ClientFailed"}  # AMQP window
    cases[11] = {"name": cases[11]["name"], "skipped": "moto is not installed"}
    assert cases[9]["name"] == bench_sqs.case_name("WeirMQ", bench_sqs.AMQP_SEND)
    assert cases[11]["name"] == bench_sqs.case_name("moto", "send", 1_000)
    out = {c["name"]: c for c in bench_sqs.add_ratios(cases)}
    assert out[cases[0]["name"]] == cases[0] and out[cases[11]["name"]] == cases[11]
    send_100k = out["SendMessageBatch x10: WeirMQ at 100,000"]
    assert "ratio_to_shallow" not in send_100k  # it is the shallowest measured now
    assert send_100k["ratio_to_amqp"] is None and send_100k["cpu_ratio_to_amqp"] is None
    assert send_100k["ratio_to_amqp_each"] == pytest.approx(5.4)
    assert bench_sqs.add_ratios(cases) is not cases and "ratio_to_amqp" not in cases[2]


# --- Targets and the table ---------------------------------------------------------------------


def test_the_reports_names_are_the_workloads() -> None:
    assert (
        report.SQS_SERVER,
        report.SQS_API,
        report.SQS_SEND,
        report.SQS_RECEIVE,
        report.SQS_BOTO3,
        report.SQS_LIGHT,
    ) == (
        bench_sqs.WEIRMQ,
        bench_sqs.SQS,
        bench_sqs.SEND,
        bench_sqs.RECEIVE,
        bench_sqs.BOTO3,
        bench_sqs.LIGHT,
    )


def test_issue_22_targets_read_the_deepest_queue() -> None:
    document = {"workloads": {"sqs": {"cases": bench_sqs.add_ratios(sample_cases())}}}
    targets = {t["target"]: t for t in report.targets(document) if t["issue"] == 22}
    assert len(targets) == 6
    flat_send = targets["SQS SendMessageBatch msg/s: deepest ÷ shallowest queue"]
    assert flat_send["measured"] == pytest.approx(0.9) and flat_send["met"] is True
    flat_light = targets["SQS SendMessageBatch (light client) msg/s: deepest ÷ shallowest queue"]
    assert flat_light["measured"] == pytest.approx(0.8) and flat_light["met"] is True
    # ÷ AMQP with the light client's figures, not boto3's (0.45 and 0.275).
    to_amqp = targets[
        "SQS send (light client) ÷ AMQP publish with a confirm window, msg/s, deepest queue"
    ]
    assert to_amqp["measured"] == pytest.approx(0.8) and to_amqp["met"] is True
    receive = targets[
        "SQS receive + delete (light client) ÷ AMQP consume with an ack each, msg/s, deepest queue"
    ]
    assert receive["measured"] == pytest.approx(0.55) and receive["met"] is True
    empty = {t["target"]: t for t in report.targets({"workloads": {}}) if t["issue"] == 22}
    assert all(t["measured"] is None and t["met"] is None for t in empty.values())


def test_the_table_shows_the_rows_and_the_failures() -> None:
    cases = bench_sqs.add_ratios(sample_cases())
    cases.append({"name": "SendMessageBatch x10: moto at 5", "skipped": "moto is not installed"})
    document = {
        "workloads": {"sqs": {"description": "d", "params": {}, "cases": cases}},
        "targets": [],
    }
    text = report.render(document)
    assert "÷ AMQP per CPU" in text and "SendMessageBatch x10: WeirMQ at 100,000" in text
    assert "5,400" in text and "0.45" in text
    assert "SendMessageBatch x10: moto at 5: skipped: moto is not installed" in text


# --- End to end --------------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@pytest.mark.slow
@pytest.mark.integration
def test_quick_run_measures_sqs_amqp_and_moto(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "weirmq",
            "bench",
            "--quick",
            "--workload",
            "sqs",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert list(document["workloads"]) == ["sqs"]
    workload = document["workloads"]["sqs"]
    cases = {c["name"]: c for c in workload["cases"]}
    quick = bench_sqs.plan(True)
    assert set(cases) == {n for part in bench_sqs.case_names(quick).values() for n in part}
    for name, case in cases.items():
        assert "error" not in case, case
        if "skipped" in case:  # moto only, where it is not installed
            assert ": moto " in name, case
            continue
        assert case["messages"] > 0 and case["messages_per_s"] > 0, name
        assert is_number(case["broker_cpu_percent"]) and case["broker_peak_rss_mb"] > 0, name
        assert case["messages_per_broker_cpu_s"] > 0 and case["limit"], name
        assert case["client_cpu_us_per_message"] > 0, name
    for depth in quick.depths:
        send = cases[bench_sqs.case_name("WeirMQ", "send", depth)]
        receive = cases[bench_sqs.case_name("WeirMQ", "receive", depth)]
        # Every message of the phase moved, and the queue is back at its depth.
        assert send["messages"] == receive["messages"] == quick.messages
        assert send["depth_after"] == receive["depth_after"] == depth
        assert send["clients"] == bench_sqs.CLIENTS
        assert len(send["client_cpu_percent"]) == bench_sqs.CLIENTS
        assert 0 < send["call_p50_ms"] <= send["call_p99_ms"]
        assert 0 < receive["delete_p50_ms"] <= receive["delete_p99_ms"]
        assert send["ratio_to_amqp"] > 0 and receive["ratio_to_amqp"] > 0
        # The light client's, at the same depth on the same queue, checked as boto3's.
        light_send = cases[bench_sqs.case_name("WeirMQ", "send", depth, client="light")]
        light_receive = cases[bench_sqs.case_name("WeirMQ", "receive", depth, client="light")]
        assert light_send["messages"] == light_receive["messages"] == quick.messages
        assert light_send["depth_after"] == light_receive["depth_after"] == depth
        assert light_send["client"] == "light" and send["client"] == "boto3"
        assert light_send["clients"] == bench_sqs.LIGHT_PROCESSES
        assert light_send["calls_in_flight"] == (
            bench_sqs.LIGHT_PROCESSES * bench_sqs.LIGHT_CONCURRENCY
        )
        assert 0 < light_send["call_p50_ms"] <= light_send["call_p99_ms"]
        assert 0 < light_receive["delete_p50_ms"] <= light_receive["delete_p99_ms"]
        assert light_send["ratio_to_amqp"] > 0 and light_receive["ratio_to_amqp"] > 0
        assert "ratio_to_moto" not in light_send
    deep = cases[bench_sqs.case_name("WeirMQ", "send", quick.depths[-1])]
    shallow = cases[bench_sqs.case_name("WeirMQ", "send", quick.depths[0])]
    assert deep["ratio_to_shallow"] == pytest.approx(
        deep["messages_per_s"] / shallow["messages_per_s"]
    )
    window = cases[bench_sqs.case_name("WeirMQ", bench_sqs.AMQP_SEND)]
    assert deep["ratio_to_amqp"] == pytest.approx(deep["messages_per_s"] / window["messages_per_s"])
    moto_send = cases[bench_sqs.case_name("moto", "send", quick.moto_depth)]
    if "skipped" not in moto_send:
        assert moto_send["limit"] and shallow["ratio_to_moto"] == pytest.approx(
            shallow["messages_per_s"] / moto_send["messages_per_s"]
        )
    targets = [t for t in document["targets"] if t["issue"] == 22]
    assert len(targets) == 6 and all(is_number(t["measured"]) for t in targets)
    assert "SendMessageBatch x10: WeirMQ at 2,000" in done.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("weirmq-bench-")] == []
