"""What ``weirmq serve`` loads before it accepts Kafka connections, and that what it leaves
for later still works on first use.

Start-up time and idle memory are mostly imports (docs/architecture.md, "Start-up"): the
admin API's aiohttp and prometheus_client load on the admin port's first connection (the
SQS API's code on the SQS port's), kio's readers, writers and schema classes on the first
Kafka request, and the client commands' libraries never. Each check runs in a fresh
interpreter, since this test process has imported everything long ago.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SERVE_IMPORTS = (
    "import weirmq.cli.main, weirmq.cli.services, weirmq.server.run, weirmq.admin.deferred"
)
NOT_AT_START = (
    # the admin API's and the SQS API's, loaded on their first connection
    "aiohttp", "prometheus_client", "weirmq.admin.http", "weirmq.admin.metrics",
    "weirmq.protocols.sqs",
    # kio's index of schema classes, readers and writers: on the first Kafka request
    "kio.index", "kio.serial",
    # the CRC-32C library (its import scans every installed distribution): on first use
    "crc32c",
    # other commands' and extras' libraries: never in a broker
    "confluent_kafka", "rich", "matplotlib", "pyspark", "pyarrow", "weirmq.bench",
    "weirmq.spark",
)  # fmt: skip


def fresh(code: str, cwd: Path) -> object:
    """Run `code` in a fresh interpreter and return what it printed, read as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=True, timeout=120, cwd=cwd,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def test_serving_imports_no_admin_kio_codec_or_client_libraries(tmp_path: Path) -> None:
    code = (
        f"import sys, json\n{SERVE_IMPORTS}\n"
        f"print(json.dumps(sorted(m for m in {NOT_AT_START!r} if m in sys.modules)))"
    )
    assert fresh(code, tmp_path) == []


# Hand-written frames, so that nothing but the broker loads kio in the child process.
def _frame(api_key: int, version: int, body: bytes) -> str:
    client_id = b"startup-test"
    header = (
        api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + (7).to_bytes(4, "big")
        + len(client_id).to_bytes(2, "big") + client_id + b"\x00"  # v2: no tagged fields
    )  # fmt: skip
    return repr(header + body)


API_VERSIONS_V3 = _frame(18, 3, b"\x02t\x021\x00")  # software name "t", version "1"
METADATA_V12_ALL = _frame(3, 12, b"\x00\x01\x00\x00")  # topics null: all; auto-create
METADATA_V12_BAD = _frame(3, 12, b"\x05")  # a 4-element topic array that is not there

FIRST_REQUESTS = f"""
import asyncio, json, sys, tempfile
{SERVE_IMPORTS}
from weirmq.broker.core import Broker
from weirmq.protocols.kafka.dispatch import CloseConnection, Dispatcher
from weirmq.settings import Settings

async def main():
    broker = Broker(Settings(data_dir=tempfile.mkdtemp(dir=".")))
    try:
        dispatcher = Dispatcher(broker)
        before = "kio.serial" in sys.modules
        results = {{"kio_before": before}}
        for name, frame in FRAMES:
            try:
                reply = dispatcher.handle(frame)
                results[name] = b"".join([reply.prefix, *reply.body]).hex()
            except CloseConnection as exc:
                results[name] = "closed: " + str(exc)
        results["metadata_modules"] = sorted({{
            int(m.split(".")[3][1:]) for m in sys.modules
            if m.startswith("kio.schema.metadata.v") and m.count(".") == 4
        }})
        print(json.dumps(results))
    finally:
        broker.close()

asyncio.run(main())
"""


def _first(frames: dict[str, str], cwd: Path) -> dict[str, object]:
    listed = ", ".join(f"({name!r}, {frame})" for name, frame in frames.items())
    result = fresh(f"FRAMES = [{listed}]\n" + FIRST_REQUESTS, cwd)
    assert isinstance(result, dict)
    return result


def test_the_first_requests_load_kio_and_are_answered(tmp_path: Path) -> None:
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    result = _first({"api_versions": API_VERSIONS_V3, "metadata": METADATA_V12_ALL}, tmp_path)
    assert result["kio_before"] is False

    def body(name: str, api_key: int, version: int) -> object:
        raw = bytes.fromhex(str(result[name]))
        assert int.from_bytes(raw[4:8], "big") == 7  # the correlation id
        cls = load_response_schema(api_key, version)
        offset = 9 if cls.__header_schema__.__flexible__ else 8
        response, size = entity_reader(cls)(raw, offset)
        assert offset + size == len(raw)
        return response

    versions = body("api_versions", 18, 3)
    assert versions.error_code == 0  # type: ignore[attr-defined]
    assert {a.api_key for a in versions.api_keys} >= {0, 1, 3, 18}  # type: ignore[attr-defined]
    metadata = body("metadata", 3, 12)
    assert [b.node_id for b in metadata.brokers] == [0]  # type: ignore[attr-defined]
    # The handler writes a v13 field and a v8-10 one; finding them loads the versions
    # from the newest down to v10, not all fourteen (weirmq/protocols/kafka/wire/messages.py).
    assert result["metadata_modules"] == [10, 11, 12, 13]


def test_a_bad_first_request_gets_its_clear_error(tmp_path: Path) -> None:
    result = _first({"metadata": METADATA_V12_BAD}, tmp_path)
    assert str(result["metadata"]).startswith("closed: malformed MetadataRequest v12: ")
