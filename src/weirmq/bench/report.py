"""Turning a run's results into a table, a list of targets met or missed, and a plot.

The results are the JSON document `weirmq.bench.runner` writes: ``{"workloads": {name:
{"description", "params", "cases": [...]}}, ...}``. Everything here reads that document
and nothing else, so a saved JSON file can be re-rendered later (``weirmq bench --from
FILE``).

The targets are issue 6's (the first version of the suite), issue 17's (the cost of a
request: small batches, per-request overhead, many partitions, latency, start and stop),
issue 18's (routing through an exchange against plain produce) and issue 19's (delayed
delivery: lateness from the due time to a consumer, none early; share-group consume with
per-record acknowledgement against a classic group's) and issue 22's (SQS throughput flat
from the shallowest queue to the deepest, and at least half of the same broker's AMQP)
and issue 24's (transactional produce at least 0.8 of idempotent produce).
Each is computed from the figures of one run, so a ratio always compares two measurements
taken minutes apart on the same machine, never against a figure from another day. A target
whose figures the run did not measure (a workload left out, a quick run) is "not
measured", never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from weirmq.bench.results import table

Case = dict[str, Any]


def cases(document: dict[str, Any], workload: str) -> list[Case]:
    return list(document.get("workloads", {}).get(workload, {}).get("cases", []))


def find(document: dict[str, Any], workload: str, name: str) -> Case | None:
    """The case called `name`, if it ran and did not fail."""
    for case in cases(document, workload):
        if case.get("name") == name and "error" not in case and "skipped" not in case:
            return case
    return None


def _get(case: Case | None, key: str) -> float | None:
    value = None if case is None else case.get(key)
    return value if isinstance(value, int | float) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def per_request_overhead_us(small: Case | None, large: Case | None) -> float | None:
    """Broker CPU per request beyond the per-byte cost, in µs, from two cases that moved
    data in small and in large requests:

        (CPU s/GB small - CPU s/GB large) / (requests/GB small - requests/GB large)

    None if a figure is missing, or if the small case did not take more requests per GB
    (then there is no difference to attribute the CPU to).
    """
    cpu_small, cpu_large = _get(small, "broker_cpu_s_per_gb"), _get(large, "broker_cpu_s_per_gb")
    req_small, req_large = _get(small, "requests_per_gb"), _get(large, "requests_per_gb")
    if cpu_small is None or cpu_large is None or req_small is None or req_large is None:
        return None
    if req_small <= req_large:
        return None
    return (cpu_small - cpu_large) / (req_small - req_large) * 1e6


# --- Targets -----------------------------------------------------------------------------


Check = Callable[[float], bool] | None
Row = tuple[str, float | None, str, Check]  # what, measured, goal, how to check it

# Issue 17's small batches and fetches: workloads.SMALL_REQUEST_BYTES (a test checks that
# the two agree; this module reads documents and imports no workload).
SMALL_BATCH_BYTES = 60_000
STOP_TARGET = "clean stop with 10,000 partitions, s"
# The `share` workload's cases: workloads.SHARE_CASE and CLASSIC_CASE (a test checks).
SHARE_CASE = "share group, explicit ack x2"
CLASSIC_CASE = "classic group x2"
# The `sqs` workload's fields: sqs.WEIRMQ, SQS, SEND, RECEIVE, BOTO3 and LIGHT (a test checks).
SQS_SERVER, SQS_API, SQS_SEND, SQS_RECEIVE = "WeirMQ", "SQS", "send", "receive"
SQS_BOTO3, SQS_LIGHT = "boto3", "light"
# The `transactions` workload's: workloads.TXN_CASE and TRANSACTION_MESSAGES (a test checks).
TRANSACTION_MESSAGES = 1_000
TXN_CASE = f"1 KB transactions of {TRANSACTION_MESSAGES:,}"


def targets(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of issues 6, 17, 18, 19, 22 and 24: what it asks, the figure measured,
    whether it held.

    ``met`` is None when the figures it needs were not measured in this run. A case that
    failed where the target is that it works (10,000 partitions; a clean stop) is a
    measured miss, with the failure as its note.
    """
    failed_stop = next((c for c in cases(document, "stop")
                        if c.get("name") == "10000 partitions" and "error" in c), None)
    out = _issue_6(document)
    for what, measured, goal, check in _issue_17(document):
        target = _target(17, what, measured, goal, check)
        if what == STOP_TARGET and failed_stop is not None:
            target.update(met=False, note=failed_stop["error"])
        out.append(target)
    out += [_target(18, what, measured, goal, check)
            for what, measured, goal, check in _issue_18(document)]
    out += [_target(19, what, measured, goal, check)
            for what, measured, goal, check in _issue_19(document)]
    out += [_target(22, what, measured, goal, check)
            for what, measured, goal, check in _issue_22(document)]
    out += [_target(24, what, measured, goal, check)
            for what, measured, goal, check in _issue_24(document)]
    return out


def _target(issue: int, what: str, measured: float | None, goal: str,
            check: Check) -> dict[str, Any]:
    met = None if measured is None or check is None else bool(check(measured))
    return {"issue": issue, "target": what, "goal": goal, "measured": measured, "met": met}


def _at_most(limit: float) -> Check:
    return lambda v: v <= limit


def _at_least(limit: float) -> Check:
    return lambda v: v >= limit


def _issue_6(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 6's targets, as they were first written."""
    def get(workload: str, name: str, key: str) -> float | None:
        return _get(find(document, workload, name), key)

    acks_ratio = _ratio(get("produce", "1 KB acks=all x1", "mb_per_s"),
                        get("produce", "1 KB acks=1 x1", "mb_per_s"))
    partitions_ratio = _ratio(get("partitions", "1000 partitions default", "mb_per_s"),
                              get("partitions", "10 partitions default", "mb_per_s"))
    ten_thousand = next((c for c in cases(document, "partitions")
                         if c.get("name") == "10000 partitions default"), None)
    rows: list[tuple[str, float | None, str, Callable[[float], bool] | None]] = [
        ("produce 1 KB: acks=all / acks=1 throughput", acks_ratio, ">= 0.5",
         lambda v: v >= 0.5),
        ("1,000 partitions / 10 partitions throughput", partitions_ratio, ">= 0.8",
         lambda v: v >= 0.8),
        ("broker RSS at 1,000 partitions, MB",
         get("partitions", "1000 partitions default", "broker_peak_rss_mb"), "<= 80",
         lambda v: v <= 80),
        ("10,000 partitions work (produce delivered, MB/s)",
         None if ten_thousand is None or "error" in ten_thousand
         else _get(ten_thousand, "mb_per_s"), "works", lambda v: v > 0),
        ("end-to-end p99 at 5,000 msg/s of 1 KB, acks=1, ms",
         get("latency", "5000 msg/s", "p99_ms"), "<= 5", lambda v: v <= 5),
        ("start-up, ms", get("startup", "startup", "announced_ms"), "<= 500",
         lambda v: v <= 500),
        ("idle CPU, % of one core", get("idle", "idle", "cpu_percent"), "<= 0.5",
         lambda v: v <= 0.5),
        ("broker CPU per GB produced, 1 KB, acks=all (librdkafka defaults), s",
         get("produce", "1 KB acks=all x1", "broker_cpu_s_per_gb"), "as low as possible",
         None),
        ("broker CPU per GB produced, 1 KB, acks=1, s",
         get("produce", "1 KB acks=1 x1", "broker_cpu_s_per_gb"), "as low as possible", None),
        ("broker CPU per GB consumed (catch-up), 1 KB, s",
         _get(next((c for c in cases(document, "consume")
                    if c.get("value_bytes") == 1024 and "error" not in c), None),
              "broker_cpu_s_per_gb"), "as low as possible", None),
    ]
    # A failed 10,000-partition case is a measured miss, not a missing measurement.
    out = []
    for what, measured, goal, check in rows:
        if what.startswith("10,000") and ten_thousand is not None and "error" in ten_thousand:
            out.append({"issue": 6, "target": what, "goal": goal, "measured": None,
                        "met": False, "note": ten_thousand["error"]})
            continue
        out.append(_target(6, what, measured, goal, check))
    return out


def _issue_17(document: dict[str, Any]) -> list[Row]:
    """Issue 17's targets: per-request cost, small batches, round-robin, latency, start, stop."""
    def get(workload: str, name: str, key: str) -> float | None:
        return _get(find(document, workload, name), key)

    def produced(value_bytes: int, acks: str, small: bool, key: str) -> float | None:
        return _get(_produce_case(document, value_bytes, acks, small), key)

    rows: list[Row] = []
    for api in ("produce", "fetch"):
        rows.append((f"{api}: broker CPU per request beyond the per-byte cost, µs",
                     per_request_overhead_us(*_requests_pair(document, api)), "<= 20",
                     _at_most(20)))
    batch = f"batch.size={SMALL_BATCH_BYTES}"
    for size, value_bytes in (("1 KB", 1024), ("16 KB", 16 * 1024)):
        rows += [(f"produce {size} acks={acks}, {batch}: broker CPU/GB ÷ the same at "
                  "default 1 MB batches",
                  _ratio(produced(value_bytes, acks, True, "broker_cpu_s_per_gb"),
                         produced(value_bytes, acks, False, "broker_cpu_s_per_gb")),
                  "<= 1.5", _at_most(1.5)) for acks in ("1", "all")]
        rows.append((f"produce {size}: acks=all ÷ acks=1 throughput at {batch}",
                     _ratio(produced(value_bytes, "all", True, "mb_per_s"),
                            produced(value_bytes, "1", True, "mb_per_s")),
                     ">= 0.8", _at_least(0.8)))
    rows += [
        ("1,000 partitions: round-robin ÷ default (sticky) partitioner, broker CPU/GB",
         _ratio(get("partitions", "1000 partitions round-robin", "broker_cpu_s_per_gb"),
                get("partitions", "1000 partitions default", "broker_cpu_s_per_gb")),
         "<= 1.5", _at_most(1.5)),
        ("end-to-end p99 at 5,000 msg/s of 1 KB, acks=1, ms (on a quiet machine)",
         get("latency", "5000 msg/s", "p99_ms"), "<= 2", _at_most(2)),
        ("broker's share of that p99 (its own p99 ÷ end-to-end p99)",
         get("latency", "5000 msg/s", "broker_p99_share"), "shown", None),
        ("start-up to accepting connections, ms",
         get("startup", "startup", "announced_ms"), "<= 150", _at_most(150)),
        (STOP_TARGET, get("stop", "10000 partitions", "stop_s"), "<= 2", _at_most(2)),
        ("idle RSS, MB", get("idle", "idle", "rss_mb"), "<= 40", _at_most(40)),
    ]
    return rows


def _issue_18(document: dict[str, Any]) -> list[Row]:
    """Issue 18's targets: records/s into destinations through a topic exchange, against
    plain produce in the same run."""
    def routed(name: str) -> float | None:
        return _get(find(document, "routing", name), "routed_per_s")

    plain = routed("plain")
    return [(f"routed ÷ plain records/s, topic exchange with {n} bindings",
             _ratio(routed(f"topic exchange, {n} bindings"), plain), goal, _at_least(limit))
            for n, goal, limit in (("10", ">= 0.5", 0.5), ("10,000", ">= 0.4", 0.4))]


def _issue_19(document: dict[str, Any]) -> list[Row]:
    """Issue 19's targets: the worst p99 lateness of the `delay` cases, and no record early;
    a share group's consume with explicit acknowledgement against a classic group's, read
    from one topic in the same run, and what each costs the broker per record."""
    measured = [c for c in cases(document, "delay") if "error" not in c]
    p99s = [c["lateness_p99_ms"] for c in measured if c.get("lateness_p99_ms") is not None]
    early = [c["early"] for c in measured if c.get("early") is not None]
    shared, classic = find(document, "share", SHARE_CASE), find(document, "share", CLASSIC_CASE)
    return [("delay lateness p99 ms (worst case)", max(p99s) if p99s else None, "<= 100",
             _at_most(100)),
            ("delayed records delivered early", sum(early) if early else None, "0",
             _at_most(0)),
            ("share-group consume (explicit ack, 2 consumers) ÷ classic group, records/s",
             _ratio(_get(shared, "records_per_s"), _get(classic, "records_per_s")), ">= 0.3",
             _at_least(0.3)),
            ("share-group consume: broker CPU per record, µs",
             _get(shared, "broker_cpu_us_per_record"), "shown", None),
            ("classic-group consume: broker CPU per record, µs",
             _get(classic, "broker_cpu_us_per_record"), "shown", None)]


def _issue_22(document: dict[str, Any]) -> list[Row]:
    """Issue 22's targets, from the `sqs` workload's rows of WeirMQ at its deepest queue:
    throughput flat with depth (÷ the same at the shallowest; 0.8 allows for this
    machine's run-to-run noise), with either client, and at least half of AMQP's on the
    same broker, with the light client (its cost per call is near pika's, as boto3's is
    not: the ratio is then the broker's, not the client's)."""
    rows: list[Row] = []
    for client, label in ((SQS_BOTO3, ""), (SQS_LIGHT, " (light client)")):
        send = _sqs_deepest(document, SQS_SEND, client)
        receive = _sqs_deepest(document, SQS_RECEIVE, client)
        rows += [(f"SQS SendMessageBatch{label} msg/s: deepest ÷ shallowest queue",
                  _get(send, "ratio_to_shallow"), ">= 0.8", _at_least(0.8)),
                 (f"SQS ReceiveMessage + DeleteMessageBatch{label} msg/s: deepest ÷ "
                  "shallowest queue", _get(receive, "ratio_to_shallow"), ">= 0.8",
                  _at_least(0.8))]
    send = _sqs_deepest(document, SQS_SEND, SQS_LIGHT)
    receive = _sqs_deepest(document, SQS_RECEIVE, SQS_LIGHT)
    rows += [
        ("SQS send (light client) ÷ AMQP publish with a confirm window, msg/s, deepest queue",
         _get(send, "ratio_to_amqp"), ">= 0.5", _at_least(0.5)),
        ("SQS receive + delete (light client) ÷ AMQP consume with an ack each, msg/s, "
         "deepest queue", _get(receive, "ratio_to_amqp"), ">= 0.5", _at_least(0.5)),
    ]
    return rows


def _issue_24(document: dict[str, Any]) -> list[Row]:
    """Issue 24's target: transactional produce (1 KB, 1,000 per transaction) against
    idempotent produce, the medians of alternating rounds in the same run."""
    txn = find(document, "transactions", TXN_CASE)
    return [(f"transactional ÷ idempotent produce msg/s, 1 KB, {TRANSACTION_MESSAGES:,} per "
             "transaction", _get(txn, "ratio_to_idempotent"), ">= 0.8", _at_least(0.8))]


def _sqs_deepest(document: dict[str, Any], phase: str, client: str) -> Case | None:
    """WeirMQ's SQS case of `phase` with `client` at the deepest queue measured (a case
    from before the light client has no client: boto3's)."""
    rows = [c for c in cases(document, "sqs")
            if "error" not in c and "skipped" not in c and c.get("server") == SQS_SERVER
            and c.get("api") == SQS_API and c.get("phase") == phase
            and c.get("client", SQS_BOTO3) == client]
    return max(rows, key=lambda c: c["depth"], default=None)


def _produce_case(document: dict[str, Any], value_bytes: int, acks: str,
                  small: bool) -> Case | None:
    """The one-producer produce case of that size and acks, with small or default batches."""
    return next((c for c in cases(document, "produce")
                 if "error" not in c and c.get("value_bytes") == value_bytes
                 and c.get("acks") == acks and c.get("producers") == 1
                 and (c.get("batch_size") is not None) == small), None)


def _requests_pair(document: dict[str, Any], api: str) -> tuple[Case | None, Case | None]:
    """The `requests` workload's (small, large) cases of `api` ("produce" or "fetch")."""
    measured = [c for c in cases(document, "requests")
                if str(c.get("api", "")).lower() == api and "error" not in c]
    small = next((c for c in measured if c.get("request_bytes") is not None), None)
    large = next((c for c in measured if c.get("request_bytes") is None), None)
    return small, large


# --- Text ----------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "/".join(_fmt(v, 0) for v in value)
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


# For each workload: (header, key, digits) of the columns after the case name.
COLUMNS: dict[str, Sequence[tuple[str, str, int]]] = {
    "startup": [("announced ms", "announced_ms", 0), ("max ms", "announced_ms_max", 0),
                ("first Metadata ms", "first_metadata_ms", 0)],
    "idle": [("s", "seconds", 0), ("CPU %", "cpu_percent", 2), ("RSS MB", "rss_mb", 1)],
    "produce": [("msg/s", "messages_per_s", 0), ("MB/s", "mb_per_s", 1),
                ("broker CPU s/GB", "broker_cpu_s_per_gb", 2),
                ("broker CPU %", "broker_cpu_percent", 0),
                ("requests", "requests", 0), ("CPU µs/request", "broker_cpu_us_per_request", 0),
                ("broker peak RSS MB", "broker_peak_rss_mb", 0),
                ("client CPU %", "client_cpu_percent", 0), ("limit", "limit", 0)],
    "consume": [("msg/s", "messages_per_s", 0), ("MB/s", "mb_per_s", 1),
                ("broker CPU s/GB", "broker_cpu_s_per_gb", 2),
                ("broker CPU %", "broker_cpu_percent", 0),
                ("requests", "requests", 0), ("CPU µs/request", "broker_cpu_us_per_request", 0),
                ("client CPU %", "client_cpu_percent", 0), ("limit", "limit", 0)],
    "requests": [("messages", "messages", 0), ("MB/s", "mb_per_s", 1),
                 ("requests", "requests", 0), ("requests/GB", "requests_per_gb", 0),
                 ("broker CPU s/GB", "broker_cpu_s_per_gb", 2),
                 ("CPU µs/request", "broker_cpu_us_per_request", 0),
                 ("overhead µs/request", "overhead_us_per_request", 1), ("limit", "limit", 0)],
    "latency": [("achieved msg/s", "achieved_rate_per_s", 0), ("p50 ms", "p50_ms", 2),
                ("p99 ms", "p99_ms", 2), ("p99.9 ms", "p999_ms", 2), ("max ms", "max_ms", 2),
                ("broker p50 ms", "broker_p50_ms", 2), ("broker p99 ms", "broker_p99_ms", 2),
                ("broker share of p99", "broker_p99_share", 2),
                ("broker CPU %", "broker_cpu_percent", 0),
                ("client CPU %", "client_cpu_percent", 0)],
    "partitions": [("create s", "create_s", 2), ("MB/s", "mb_per_s", 1),
                   ("msg/s", "messages_per_s", 0), ("written to", "partitions_touched", 0),
                   ("RSS before MB", "rss_before_mb", 0),
                   ("peak RSS MB", "broker_peak_rss_mb", 0),
                   ("broker CPU s/GB", "broker_cpu_s_per_gb", 2), ("limit", "limit", 0)],
    "stop": [("create s", "create_s", 2), ("messages", "messages", 0),
             ("written to", "partitions_written", 0), ("RSS MB", "rss_before_stop_mb", 0),
             ("stop s", "stop_s", 2), ("ms/partition", "stop_ms_per_partition", 2),
             ("exit code", "exit_code", 0)],
    "delay": [("records", "records", 0), ("arrived", "arrived", 0),
              ("late p50 ms", "lateness_p50_ms", 0), ("p99 ms", "lateness_p99_ms", 0),
              ("p99.9 ms", "lateness_p999_ms", 0), ("max ms", "lateness_max_ms", 0),
              ("early", "early", 0)],
    "share": [("records/s", "records_per_s", 0), ("MB/s", "mb_per_s", 1),
              ("s", "seconds", 2), ("join s", "join_s", 2),
              ("broker CPU µs/record", "broker_cpu_us_per_record", 1),
              ("broker CPU %", "broker_cpu_percent", 0),
              ("ShareFetch", "ShareFetch_requests", 0),
              ("ShareAck", "ShareAcknowledge_requests", 0), ("Fetch", "Fetch_requests", 0),
              ("client CPU %", "client_cpu_percent", 0), ("÷ classic", "ratio_to_classic", 2),
              ("limit", "limit", 0)],
    "amqp": [("msg/s", "messages_per_s", 0), ("runs msg/s", "messages_per_s_runs", 0),
             ("÷ RabbitMQ", "ratio_to_rabbitmq", 2), ("MB/s", "mb_per_s", 1),
             ("server CPU %", "broker_cpu_percent", 0),
             ("server CPU µs/msg", "broker_cpu_us_per_message", 1),
             ("server peak RSS MB", "broker_peak_rss_mb", 0),
             ("client CPU %", "client_cpu_percent", 0), ("limit", "limit", 0)],
    "sqs": [("depth", "depth", 0), ("msg/s", "messages_per_s", 0),
            ("÷ shallow", "ratio_to_shallow", 2), ("÷ AMQP", "ratio_to_amqp", 2),
            ("÷ AMQP each", "ratio_to_amqp_each", 2),
            ("÷ AMQP per CPU", "cpu_ratio_to_amqp", 2), ("÷ moto", "ratio_to_moto", 1),
            ("p50 ms", "call_p50_ms", 1), ("p99 ms", "call_p99_ms", 1),
            ("del p50 ms", "delete_p50_ms", 1), ("del p99 ms", "delete_p99_ms", 1),
            ("broker CPU %", "broker_cpu_percent", 0),
            ("msg/CPU-s", "messages_per_broker_cpu_s", 0),
            ("peak RSS MB", "broker_peak_rss_mb", 0),
            ("client CPU µs/msg", "client_cpu_us_per_message", 0), ("limit", "limit", 0)],
    "transactions": [("msg/s", "messages_per_s", 0), ("runs msg/s", "messages_per_s_runs", 0),
                     ("÷ idempotent", "ratio_to_idempotent", 2), ("MB/s", "mb_per_s", 1),
                     ("broker CPU %", "broker_cpu_percent", 0),
                     ("broker CPU s/GB", "broker_cpu_s_per_gb", 2),
                     ("client CPU %", "client_cpu_percent", 0), ("limit", "limit", 0)],
    "rebalance": [("runs", "runs", 0), ("join s med", "rebalance_s_median", 2),
                  ("max", "rebalance_s_max", 2),
                  ("new assigned s", "new_member_assigned_s_median", 2),
                  ("leave s med", "leave_s_median", 2), ("max", "leave_s_max", 2)],
}


def render(document: dict[str, Any]) -> str:
    """The whole run as text: one table per workload, then the targets."""
    lines: list[str] = []
    machine = document.get("machine", {})
    broker = document.get("broker", {})
    lines.append(f"weirmq bench on {machine.get('cpu_count')} cores ({machine.get('cpu_model')}),"
                 f" {machine.get('memory_gib')} GiB, Python {machine.get('python')}; broker: "
                 f"{broker.get('description', '?')}")
    for name, workload in document.get("workloads", {}).items():
        lines += ["", f"{name}: {workload.get('description', '')}"]
        columns = COLUMNS.get(name, [])
        rows, notes = [], []
        for case in workload.get("cases", []):
            if "error" in case:
                notes.append(f"  {case['name']}: FAILED: {case['error']}")
            elif "skipped" in case:
                notes.append(f"  {case['name']}: skipped: {case['skipped']}")
            else:
                rows.append([case["name"], *(_fmt(case.get(k), d) for _, k, d in columns)])
        if rows:
            lines += table(["case", *(h for h, _, _ in columns)], rows)
        lines += notes
    lines += ["", "targets:"]
    every = document.get("targets", [])
    # Grouped by issue, in order; a document saved before targets had issues is one group.
    for issue in dict.fromkeys(t.get("issue") for t in every):
        if issue is not None:
            lines.append(f"  issue {issue}:")
        rows = [[t["target"], t["goal"], _fmt(t["measured"], 2), _verdict(t)]
                for t in every if t.get("issue") == issue]
        lines += table(["target", "goal", "measured", ""], rows)
    return "\n".join(lines)


def _verdict(target: dict[str, Any]) -> str:
    if target["met"] is not None:
        return "met" if target["met"] else "MISSED"
    return "not measured" if target["measured"] is None else ""


# --- Plot ----------------------------------------------------------------------------------


def plot(document: dict[str, Any], path: Path) -> None:
    """A PNG with one panel per workload that has figures to draw.

    matplotlib is an optional dependency (``pip install weirmq[bench]``), imported only
    here, with the non-interactive Agg backend so no display is needed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(18, 10))
    panels = [_plot_throughput("produce", "produce throughput"),
              _plot_throughput("consume", "consume (catch-up) throughput"),
              _plot_latency, _plot_partitions, _plot_rebalance, _plot_summary]
    for panel, ax in zip(panels, axes.flat, strict=True):
        panel(document, ax)
    machine = document.get("machine", {})
    figure.suptitle(f"weirmq bench, {document.get('started', '')}: "
                    f"{document.get('broker', {}).get('description', '')}; "
                    f"{machine.get('cpu_count')} cores, Python {machine.get('python')}")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _measured(document: dict[str, Any], workload: str) -> list[Case]:
    return [c for c in cases(document, workload) if "error" not in c and "skipped" not in c]


def _empty(ax: Any, title: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _bars(ax: Any, labels: list[str], values: list[float], title: str, ylabel: str) -> None:
    ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(values)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    for i, v in enumerate(values):
        ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize=7)


def _plot_throughput(workload: str, title: str) -> Callable[[dict[str, Any], Any], None]:
    """A panel of MB/s bars, one per case of `workload`."""

    def panel(document: dict[str, Any], ax: Any) -> None:
        rows = _measured(document, workload)
        if not rows:
            return _empty(ax, title)
        _bars(ax, [c["name"] for c in rows], [c["mb_per_s"] for c in rows], title, "MB/s")

    return panel


def _plot_latency(document: dict[str, Any], ax: Any) -> None:
    import matplotlib.ticker

    rows = _measured(document, "latency")
    if not rows:
        return _empty(ax, "end-to-end latency")
    keys = [("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms"), ("max", "max_ms")]
    width = 0.8 / len(rows)
    for i, case in enumerate(rows):
        xs = [k + i * width for k in range(len(keys))]
        ax.bar(xs, [case[key] for _, key in keys], width, label=case["name"])
    ax.set_xticks([k + width * (len(rows) - 1) / 2 for k in range(len(keys))],
                  [label for label, _ in keys])
    ax.set_yscale("log")
    # Plain numbers on the log axis (1, 2, 5, 10 ms), not powers of ten.
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("ms (log)")
    ax.set_title("end-to-end latency, 1 KB, acks=1")
    ax.legend(fontsize=8)


def _plot_partitions(document: dict[str, Any], ax: Any) -> None:
    rows = _measured(document, "partitions")
    if not rows:
        return _empty(ax, "partition scaling")
    rss_axis = ax.twinx()
    for mode, style in (("default", "-"), ("round-robin", "--")):
        these = sorted((c for c in rows if c.get("mode") == mode), key=lambda c: c["partitions"])
        if not these:
            continue
        counts = [c["partitions"] for c in these]
        ax.plot(counts, [c["mb_per_s"] for c in these], "o" + style, color="tab:blue",
                label=f"MB/s ({mode})")
        rss = [c.get("broker_peak_rss_mb") for c in these]
        if all(v is not None for v in rss):
            rss_axis.plot(counts, rss, "s" + style, color="tab:red", label=f"RSS MB ({mode})")
    ax.set_xscale("log")
    ax.set_xlabel("partitions")
    ax.set_ylabel("MB/s", color="tab:blue")
    rss_axis.set_ylabel("broker peak RSS, MB", color="tab:red")
    rss_axis.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    ax.set_title("partition scaling, 1 KB")
    handles = ax.get_legend_handles_labels()
    more = rss_axis.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=8, loc="lower left")


def _plot_rebalance(document: dict[str, Any], ax: Any) -> None:
    rows = _measured(document, "rebalance")
    if not rows:
        return _empty(ax, "consumer-group rebalance")
    names = [c["name"] for c in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [c["rebalance_s_median"] for c in rows], 0.4, label="join")
    ax.bar([x + 0.2 for x in xs], [c["leave_s_median"] for c in rows], 0.4, label="leave")
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("s (median)")
    ax.set_title("consumer-group rebalance, 3 -> 4 -> 3 members")
    ax.legend(fontsize=8)


def _plot_summary(document: dict[str, Any], ax: Any) -> None:
    ax.set_axis_off()
    ax.set_title("targets")
    lines = []
    for t in document.get("targets", []):
        mark = _verdict(t) or "-"
        issue = f"#{t['issue']}" if "issue" in t else ""
        lines.append(f"{mark:>6}  {_fmt(t['measured'], 2):>8}  {t['goal']:<9} {issue:>3} "
                     f"{t['target']}")
    ax.text(0, 1, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=7,
            transform=ax.transAxes, wrap=True)
