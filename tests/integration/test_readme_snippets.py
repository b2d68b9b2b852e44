"""The README's snippets, and docs/first-hour.md's, run as a new user runs them: in order,
in a shell whose PATH has the project's environment (`. .venv/bin/activate`), against a
real broker.

What is adapted, and why:

- Addresses: the README names the default ports (9092, 9644, 9324, 5672); the broker here
  listens on free ports, so those literals are replaced by its own, and `weirmq` finds it
  through `WEIRMQ_BOOTSTRAP` and `WEIRMQ_ADMIN` as a user's default would.
- `pip install ...` lines are not run: `make test` has installed those packages into this
  environment already (the packaging test checks the install itself), and the test checks
  they import instead.
- The blocks of "Two commands" and "1. Start the broker" (`make run`, `make test`: what
  CI itself is running) and of "Installing WeirMQ elsewhere" (checked by
  tests/test_packaging.py) are not run here.

Each block's output is checked against what the README says it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, TopicPartition

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BLOCK_TIMEOUT_S = 240
NOT_RUN_SECTIONS = {"Two commands", "Installing WeirMQ elsewhere", "1. Start the broker"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
PIP_INSTALL = re.compile(r"^\s*pip install (.*)$", re.M)


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    text: str


def blocks_of(document: Path) -> list[Block]:
    """Every ```sh and ```python block of `document`, in order, with its ``##`` section."""
    text = document.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        if language not in ("sh", "python"):
            continue
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        blocks.append(Block(headings[-1] if headings else "", language, body))
    return blocks


# What each block must print (a block is found by a line it contains).
README_EXPECTED: dict[str, list[str]] = {
    "weirmq status": ["127.0.0.1"],
    "kcat -C": ["1\n2\n3\n4\n5\n"],
    'producer.produce("payments"': ["b'12.00'"],
    "weirmq topics describe orders": ["k1=hello", "k2=world"],
    "weirmq consume eu-orders": ["o-1"],
    "curl -s 127.0.0.1:9644/api/v1/topics/orders": ['"name": "orders"'],
    "import pika": ["b'resize image 42'"],
    "import boto3": ["resize photo 17"],
    "revenue.show()": ["19.50", "3.25"],
    "def test_orders_are_published": ["1 passed"],
}
FIRST_HOUR_EXPECTED: dict[str, list[str]] = {
    "weirmq topics create shop-orders": ["shop-orders"],
    "weirmq groups describe shipping": ["shipping", "30"],
    "--to-earliest --execute": ["60\n"],
    "weirmq consume eu-shipping": ["parcel-1"],
}
NOT_EXPECTED = {"weirmq consume eu-orders": ["o-2"], "weirmq consume eu-shipping": ["parcel-2"]}


def adapted(text: str, broker: BrokerProcess) -> str:
    assert broker.admin_url is not None and broker.amqp is not None
    admin = broker.admin_url.removeprefix("http://")
    amqp_host, _, amqp_port = broker.amqp.rpartition(":")
    return (
        text.replace("127.0.0.1:9092", broker.bootstrap)
        .replace("127.0.0.1:9644", admin)
        .replace("http://127.0.0.1:9324", broker.sqs_endpoint)
        .replace('"127.0.0.1", 5672', f'"{amqp_host}", {amqp_port}')
    )


def run_block(block: Block, text: str, workdir: Path, env: dict[str, str]) -> str:
    if block.language == "sh":
        command = ["bash", "-e", "-o", "pipefail", "-c", text]
    elif "def test_" in text:  # the pytest fixture's example: a test file, run by pytest
        (workdir / "test_readme_example.py").write_text(text)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command.append("test_readme_example.py")
    else:
        command = [sys.executable, "-c", text]
    done = subprocess.run(
        command,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"block in {block.section!r} failed ({done.returncode}):\n{text}\n"
        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    )
    return done.stdout


@pytest.mark.parametrize(
    ("document", "expected"),
    [("README.md", README_EXPECTED), ("docs/first-hour.md", FIRST_HOUR_EXPECTED)],
)
def test_every_snippet_runs_in_order(
    document: str, expected: dict[str, list[str]], broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    # `. .venv/bin/activate` from the checkout: this test's own environment is that venv.
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "VIRTUAL_ENV": sys.prefix,
        "WEIRMQ_BOOTSTRAP": broker.bootstrap,
        "WEIRMQ_ADMIN": str(broker.admin_url),
        # Spark's Python workers are this Python, as with an activated venv.
        "PYSPARK_PYTHON": sys.executable,
    }
    ran = []
    for block in blocks_of(ROOT / document):
        if block.section in NOT_RUN_SECTIONS:
            continue
        text = block.text
        for packages in PIP_INSTALL.findall(text):
            check_installed(packages)
        text = PIP_INSTALL.sub("", text)
        stdout = run_block(block, adapted(text, broker), workdir, env)
        for marker, pieces in expected.items():
            if marker in block.text:
                for piece in pieces:
                    assert piece in stdout, (block.text, stdout)
                for piece in NOT_EXPECTED.get(marker, []):
                    assert piece not in stdout, (block.text, stdout)
                ran.append(marker)
    assert sorted(ran) == sorted(expected), f"a block of {document} this test checks has gone"
    if document == "README.md":
        # The Spark job's write: one row per region on the topic the README names.
        assert sorted(keys_of(broker, "revenue-by-region")) == [b"eu", b"us"]


def check_installed(packages: str) -> None:
    """`pip install X` in the README: X is importable here (make test installed it)."""
    modules = {"pika": "pika", "boto3": "boto3", "-e '.[spark]'": "pyspark"}
    assert packages.strip() in modules, f"README installs {packages!r}; add it to this test"
    __import__(modules[packages.strip()])


def keys_of(broker: BrokerProcess, topic: str) -> list[bytes]:
    settings = {"bootstrap.servers": broker.bootstrap, "group.id": "readme-check"}
    consumer = Consumer({**settings, "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        keys: list[bytes] = []
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            consumer.assign([TopicPartition(topic, partition, low)])
            for _ in range(high - low):
                message = consumer.poll(10)
                assert message is not None and message.error() is None
                keys.append(message.key())
        return keys
    finally:
        consumer.close()
