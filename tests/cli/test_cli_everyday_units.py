"""The everyday commands' pure parts, without a broker: times and topic selections as typed
on the command line, the plan of `groups reset-offsets` and its JSON, `produce`'s settings
and summary, `status`'s health handling, usage errors caught before any connection, `--json`
on every client command, and the shell completion scripts."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from weirmq.cli.main import main
from weirmq.cli.offsets import (
    PartitionFacts,
    PlanError,
    Reset,
    ResetTarget,
    TopicSelection,
    format_time_ms,
    parse_time_ms,
    parse_topic_selection,
    parse_trim_offset,
    plan_resets,
    plan_to_json,
)
from weirmq.cli.produce import PartitionTally, ProduceSettings, Tally, human_bytes, summary
from weirmq.cli.status import (
    AdminUnavailable,
    admin_health,
    admin_line,
    fetch_health,
    format_duration_ms,
    unhealthy,
)

JAN_2024_MS = 1_704_067_200_000


# -- times and selections ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1704067200000",
        "2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00",  # no zone: UTC
        "2024-01-01",
        "2024-01-01T01:00:00+01:00",
        " 2024-01-01T00:00:00.000Z ",
    ],
)
def test_a_time_is_milliseconds_or_iso_8601_utc_unless_given(text: str) -> None:
    assert parse_time_ms(text) == JAN_2024_MS


@pytest.mark.parametrize("text", ["yesterday", "", "-5", "1.5", "1969-12-31T00:00:00Z"])
def test_a_time_that_is_neither_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time_ms(text)


def test_times_print_as_iso_8601_utc() -> None:
    assert format_time_ms(JAN_2024_MS + 1) == "2024-01-01T00:00:00.001Z"


def test_topic_selections() -> None:
    assert parse_topic_selection("orders") == TopicSelection("orders")
    assert parse_topic_selection("orders:2,0,2") == TopicSelection("orders", (0, 2))
    assert parse_topic_selection("a:b:1") == TopicSelection("a:b", (1,))


@pytest.mark.parametrize("text", ["", ":1", "orders:", "orders:x", "orders:1,-2"])
def test_malformed_topic_selections_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_topic_selection(text)


def test_trim_offsets() -> None:
    assert parse_trim_offset("12") == 12
    assert parse_trim_offset("end") == -1
    with pytest.raises(ValueError):
        parse_trim_offset("-1")


# -- the plan of a reset -----------------------------------------------------------------------

FACTS = {
    ("orders", 1): PartitionFacts(earliest=10, latest=50, committed=30, at_time=40),
    ("orders", 0): PartitionFacts(earliest=0, latest=20, committed=None, at_time=-1),
}


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (ResetTarget("earliest"), [0, 10]),
        (ResetTarget("latest"), [20, 50]),
        (ResetTarget("offset", 15), [15, 15]),
        (ResetTarget("offset", 60), [20, 50]),  # clamped to the latest
        (ResetTarget("offset", 5), [5, 10]),  # clamped to the earliest
        (ResetTarget("timestamp", JAN_2024_MS), [20, 40]),  # no record that late: the end
    ],
)
def test_the_plan_of_each_target(target: ResetTarget, expected: list[int]) -> None:
    plan = plan_resets(target, FACTS)
    assert [(r.topic, r.partition) for r in plan] == [("orders", 0), ("orders", 1)]
    assert [r.current for r in plan] == [None, 30]
    assert [r.new for r in plan] == expected


def test_shifting_moves_from_the_committed_offset_within_the_log() -> None:
    facts = {("t", 0): PartitionFacts(earliest=10, latest=50, committed=30)}
    assert [r.new for r in plan_resets(ResetTarget("shift", -5), facts)] == [25]
    assert [r.new for r in plan_resets(ResetTarget("shift", -100), facts)] == [10]
    assert [r.new for r in plan_resets(ResetTarget("shift", 100), facts)] == [50]


def test_shifting_a_partition_with_nothing_committed_is_refused_by_name() -> None:
    with pytest.raises(PlanError, match="cannot shift partition orders-0: it has no committed"):
        plan_resets(ResetTarget("shift", 1), FACTS)


def test_the_plan_as_json() -> None:
    plan = [Reset("orders", 0, None, 5), Reset("orders", 1, 30, 5)]
    assert plan_to_json("billing", ResetTarget("offset", 5), plan, executed=False) == {
        "group": "billing",
        "reset": {"to": "offset", "value": 5},
        "executed": False,
        "partitions": [
            {"topic": "orders", "partition": 0, "current_offset": None, "new_offset": 5},
            {"topic": "orders", "partition": 1, "current_offset": 30, "new_offset": 5},
        ],
    }
    document = plan_to_json("g", ResetTarget("earliest"), [], executed=True)
    assert document["reset"] == {"to": "earliest", "value": None}


def test_targets_describe_themselves() -> None:
    assert ResetTarget("shift", -3).describe() == "the committed offset -3"
    assert ResetTarget("timestamp", JAN_2024_MS).describe() == (
        "the first record at or after 2024-01-01T00:00:00.000Z"
    )


# -- produce -----------------------------------------------------------------------------------


def test_idempotence_only_with_acks_all() -> None:
    config = ProduceSettings(acks="1", compression="zstd", timeout_s=2).producer_config()
    assert config == {
        "acks": "1",
        "enable.idempotence": False,
        "compression.type": "zstd",
        "message.timeout.ms": 2000,
    }
    assert ProduceSettings().producer_config()["enable.idempotence"] is True


def test_the_summary_names_partitions_and_offsets() -> None:
    tally = Tally(sent=3, bytes_sent=15, partitions={0: PartitionTally()})
    for offset in (0, 1, 2):
        tally.partitions[0].add(offset)
    assert summary("orders", tally, ProduceSettings()) == (
        "produced 3 records (15 B) to orders (partition 0: offsets 0-2)"
    )
    assert summary("orders", tally, ProduceSettings(acks="0")) == (
        "produced 3 records (15 B) to orders (1 partition; acks=0: offsets unknown)"
    )


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 999, 1500, 48_200_000)] == [
        "0 B",
        "999 B",
        "1.5 kB",
        "48.2 MB",
    ]


def test_the_json_summary_says_how_records_were_sent() -> None:
    document = Tally(sent=0).to_json("t", ProduceSettings(acks="1", compression="lz4"))
    assert document["acks"] == "1"
    assert document["compression"] == "lz4"
    assert document["bytes"] == 0


# -- status ------------------------------------------------------------------------------------


@pytest.fixture
def health_server() -> Iterator[tuple[str, dict[str, object]]]:
    """An HTTP server answering /api/v1/health with the document and status set by the test."""
    answer: dict[str, object] = {"code": 200, "body": {}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answer["body"]).encode()
            self.send_response(int(answer["code"]))  # type: ignore[call-overload]
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", answer
    finally:
        server.shutdown()
        server.server_close()


HEALTH = {
    "status": "degraded",
    "node_id": 0,
    "cluster_id": "c1",
    "version": "1.2.3",
    "uptime_ms": 3_725_000,
    "offline_partitions": 2,
}


def test_an_unhealthy_broker_is_read_from_its_503(
    health_server: tuple[str, dict[str, object]],
) -> None:
    url, answer = health_server
    answer.update(code=503, body=HEALTH)
    assert fetch_health(url) == HEALTH
    found = admin_health(url, "c1")
    assert found["reachable"] and found["same_cluster"]
    assert unhealthy({"admin": found})
    assert admin_line(found) == (
        f"Broker 0 (admin API {url}): degraded, version 1.2.3, up 1h 2m, 2 offline partitions"
    )


def test_the_health_of_another_cluster_is_not_trusted(
    health_server: tuple[str, dict[str, object]],
) -> None:
    url, answer = health_server
    answer.update(code=503, body=HEALTH)
    found = admin_health(url, "another-cluster")
    assert not found["same_cluster"]
    assert not unhealthy({"admin": found})


def test_an_answer_that_is_not_a_health_document(
    health_server: tuple[str, dict[str, object]],
) -> None:
    url, answer = health_server
    answer.update(code=200, body={"hello": "world"})
    with pytest.raises(AdminUnavailable, match="not a health document"):
        fetch_health(url)


def test_an_admin_api_that_does_not_answer_is_noted_not_raised(closed_port: int) -> None:
    found = admin_health(f"http://127.0.0.1:{closed_port}", "c1")
    assert found["reachable"] is False
    assert "refused" in found["error"]
    assert not unhealthy({"admin": found})
    assert admin_health("ftp:/nowhere", None)["reachable"] is False


@pytest.fixture
def closed_port() -> Iterator[int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_durations() -> None:
    assert [format_duration_ms(ms) for ms in (0, 45_000, 725_000, 3_725_000, 187_200_000)] == [
        "0s",
        "45s",
        "12m 5s",
        "1h 2m",
        "2d 4h",
    ]


# -- usage errors, before any connection ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["groups", "reset-offsets", "g", "--all-topics"], "give exactly one of --to-earliest"),
        (
            ["groups", "reset-offsets", "g", "--to-latest", "--to-offset", "3", "--all-topics"],
            "give exactly one of",
        ),
        (["groups", "reset-offsets", "g", "--to-latest"], "give --topic"),
        (
            ["groups", "reset-offsets", "g", "--to-latest", "--topic", "t", "--all-topics"],
            "give --topic",
        ),
        (
            [
                "groups",
                "reset-offsets",
                "g",
                "--to-latest",
                "--all-topics",
                "--dry-run",
                "--execute",
            ],
            "cannot be used together",
        ),
        (["groups", "reset-offsets", "g", "--to-timestamp", "soon"], "ISO 8601"),
        (["groups", "reset-offsets", "g", "--to-offset", "-1"], "--to-offset"),
        (["groups", "reset-offsets", "g", "--topic", "t:x", "--to-latest"], "TOPIC:PARTITION"),
        (["topics", "trim", "t"], "give --before OFFSET or --before-timestamp"),
        (["topics", "trim", "t", "--before", "1", "--before-timestamp", "1"], "give --before"),
        (["topics", "trim", "t", "--before", "soon"], "is not an offset"),
        (["consume", "t", "--from-timestamp", "1", "--group", "g"], "with --group"),
        (["consume", "t", "--from-timestamp", "1", "--from-beginning"], "cannot be used together"),
        (["produce", "t", "--compression", "brotli"], "'brotli' is not one of"),
        (["produce", "t", "--acks", "2"], "'2' is not one of"),
        (["produce", "t", "--timestamp", "later"], "ISO 8601"),
        (["produce", "t", "--file", "no/such/file"], "does not exist"),
    ],
)
def test_usage_errors_exit_2_before_connecting(args: list[str], message: str) -> None:
    # An address nothing listens on: a usage error must come before any connection.
    result = CliRunner().invoke(main, [*args, "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert message in result.output


# -- --json everywhere, completion ---------------------------------------------------------------

# `serve` prints no result, and `bench --json FILE` writes its report to a file.
NO_JSON_FLAG = {"serve", "bench"}


def _leaf_commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        command = getattr(command, "command", command)  # a LazyCommand: the real one
        if isinstance(command, click.Group):
            for sub, leaf in _leaf_commands(command, ctx):
                yield f"{name} {sub}", leaf
        else:
            yield name, command


def test_every_client_command_has_json() -> None:
    ctx = click.Context(main)
    leaves = dict(_leaf_commands(main, ctx))
    assert {"status", "groups reset-offsets", "topics trim"} <= set(leaves)
    missing = [
        name
        for name, command in leaves.items()
        if name not in NO_JSON_FLAG and not any("--json" in param.opts for param in command.params)
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _weirmq_completion weirmq"),
        ("zsh", "#compdef weirmq"),
        ("fish", "complete --no-files --command weirmq"),
    ],
)
def test_a_completion_script_for_each_shell(shell: str, marker: str) -> None:
    result = CliRunner().invoke(
        main, [], prog_name="weirmq", env={"_WEIRMQ_COMPLETE": f"{shell}_source"}
    )
    assert result.exit_code == 0, result.output
    assert marker in result.output
    assert "_WEIRMQ_COMPLETE" in result.output


def test_completion_knows_the_lazy_commands_and_their_choices() -> None:
    def complete(words: str, index: int) -> list[str]:
        env = {"_WEIRMQ_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(index)}
        result = CliRunner().invoke(main, [], prog_name="weirmq", env=env)
        assert result.exit_code == 0, result.output
        return [line.split(",", 1)[1] for line in result.output.splitlines()]

    assert complete("weirmq groups res", 2) == ["reset-offsets"]
    assert complete("weirmq stat", 1) == ["status"]
    assert complete("weirmq produce t --compression ", 4) == [
        "none",
        "gzip",
        "snappy",
        "lz4",
        "zstd",
    ]
