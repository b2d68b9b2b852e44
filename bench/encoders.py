"""Response encoder micro-benchmark: kio's general path against `wire.fast`.

Run: ``.venv/bin/python -m bench.encoders [--quick] [--json FILE]``. It prints a table and
writes every figure, the parameters and the machine to a JSON file (default
``bench/results/encoders-<timestamp>.json``, gitignored). It is not a test: nothing here
passes or fails on speed.

What it measures, in microseconds per call, for the responses the broker sends most:

- ``kio``: ``messages.encode(messages.build_response(key, version, data))``, the path
  every other response takes (kio dataclasses, then kio's Python writer);
- ``fast``: ``wire.fast.encode_produce_response`` / ``encode_fetch_response`` on the same
  data. For Fetch that is the list of buffers the server writes as they are; its records
  are not copied, while kio's writer copies them into its output.

Cases: a one-partition ProduceResponse v9 (what an acks=1 produce of one batch gets), a
one-partition FetchResponse v12 with no records (a long poll that timed out) and one with
1 MiB of records. The data has the shape the handlers return. Before timing, each case
checks that both encoders write the same bytes.

Timing uses ``timeit`` (the statement inlined in its loop, the garbage collector off).
Each figure is the best of several rounds (20; ``--quick`` 5) of about 0.05 s (``--quick``
0.02 s), kio and fast rounds alternating: best-of, because noise on a shared machine only
ever adds time, and alternating, because it comes and goes. Re-run before trusting a
difference under ~20%.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from weirmq.bench.results import machine_info, save_results, table
from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.wire import fast, messages

PRODUCE = 0
FETCH = 1
MIB = 1024 * 1024
FULL_ROUNDS = 20
QUICK_ROUNDS = 5
FULL_ROUND_S = 0.05
QUICK_ROUND_S = 0.02


# --- inputs ---------------------------------------------------------------------------


def produce_data() -> dict[str, Any]:
    """One partition, as the produce handler answers an append."""
    partition = {
        "index": 0,
        "error_code": ErrorCode.none,
        "base_offset": 1_234_567,
        "log_append_time": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }
    return {
        "responses": [{"name": "bench-events", "partition_responses": [partition]}],
        "throttle_time": 0,
    }


def fetch_data(records: bytes) -> dict[str, Any]:
    """One partition, as the fetch handler answers it."""
    partition = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": 1_234_567,
        "last_stable_offset": 1_234_567,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [{"topic": "bench-events", "partitions": [partition]}],
    }


class Case:
    """One response to encode both ways; the statements are what gets timed."""

    def __init__(self, name: str, api_key: int, version: int, data: dict[str, Any]) -> None:
        self.name = name
        self.api_key = api_key
        self.version = version
        self.data = data
        self.namespace = {"fast": fast, "messages": messages, "version": version, "data": data}
        self.kio_stmt = f"messages.encode(messages.build_response({api_key}, version, data))"
        encoder = "encode_produce_response" if api_key == PRODUCE else "encode_fetch_response"
        self.fast_stmt = f"fast.{encoder}(version, data)"

    def check(self) -> int:
        """Both encoders write the same bytes; returns their length."""
        expected = messages.encode(messages.build_response(self.api_key, self.version, self.data))
        if self.api_key == PRODUCE:
            joined = fast.encode_produce_response(self.version, self.data)
        else:
            joined = b"".join(fast.encode_fetch_response(self.version, self.data))
        if joined != expected:
            raise RuntimeError(f"{self.name}: the fast encoder disagrees with kio")
        return len(joined)


def cases() -> list[Case]:
    batch = bytes(range(256)) * (MIB // 256)
    return [
        Case("Produce v9, 1 partition", PRODUCE, 9, produce_data()),
        Case("Fetch v12, 1 partition, empty", FETCH, 12, fetch_data(b"")),
        Case("Fetch v12, 1 partition, 1 MiB", FETCH, 12, fetch_data(batch)),
    ]


# --- timing ---------------------------------------------------------------------------


def calls_per_round(timer: timeit.Timer, round_s: float) -> int:
    """How many calls fill about `round_s`."""
    count, elapsed_s = timer.autorange()
    return max(1, int(count * round_s / elapsed_s))


def us_per_call(case: Case, rounds: int, round_s: float) -> dict[str, dict[str, Any]]:
    """Rounds of kio and of fast, alternating so that both meet the same machine noise;
    each keeps its best round."""
    timers = {
        "kio": timeit.Timer(case.kio_stmt, globals=case.namespace),
        "fast": timeit.Timer(case.fast_stmt, globals=case.namespace),
    }
    counts = {name: calls_per_round(timer, round_s) for name, timer in timers.items()}
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(counts[name]) / counts[name] * 1e6)
    return {
        name: {"calls_per_round": counts[name], "rounds_us": us, "best_us": min(us)}
        for name, us in samples.items()
    }


def run(rounds: int, round_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for case in cases():
        progress(case.name)
        body_bytes = case.check()
        timings = us_per_call(case, rounds, round_s)
        results[case.name] = {
            "api_key": case.api_key,
            "version": case.version,
            "body_bytes": body_bytes,
            **timings,
            "ratio": timings["kio"]["best_us"] / timings["fast"]["best_us"],
        }
    return results


# --- reporting ------------------------------------------------------------------------


def report(results: dict[str, Any], params: dict[str, Any], machine: dict[str, Any]) -> str:
    out = [
        f"WeirMQ response encoders: us per call, best of {params['rounds']} rounds of "
        f"~{params['round_s']} s; {machine['cpu_count']} CPUs, Python {machine['python']}",
        "kio = messages.build_response + messages.encode; fast = wire.fast (Fetch: the",
        "list of buffers, records not copied). Ratio = kio / fast.",
        "",
    ]
    out += table(
        ["response", "body bytes", "kio us", "fast us", "ratio"],
        [
            [
                name,
                f"{r['body_bytes']:,}",
                f"{r['kio']['best_us']:,.2f}",
                f"{r['fast']['best_us']:,.2f}",
                f"{r['ratio']:,.1f}x",
            ]
            for name, r in results.items()
        ],
    )
    return "\n".join(out)


# --- command line ---------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.encoders", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROUNDS} rounds of {QUICK_ROUND_S} s instead of {FULL_ROUNDS} of "
        f"{FULL_ROUND_S} s",
    )
    parser.add_argument("--json", type=Path, help="results file (default: bench/results/...)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rounds = QUICK_ROUNDS if args.quick else FULL_ROUNDS
    round_s = QUICK_ROUND_S if args.quick else FULL_ROUND_S
    params: dict[str, Any] = {"quick": args.quick, "rounds": rounds, "round_s": round_s}
    started = time.strftime("%Y%m%d-%H%M%S")
    machine = machine_info()
    begin = time.perf_counter()
    results = run(rounds, round_s, lambda step: print(f"... {step}", file=sys.stderr))
    params["run_s"] = time.perf_counter() - begin
    print(report(results, params, machine))
    document = {"params": params, "machine": machine, "results": results}
    print(f"\nresults: {save_results('encoders', started, document, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
