"""kcat's balanced consumer (``-G``, librdkafka's KafkaConsumer) in a WeirMQ consumer group.

Two kcat processes join one group on a four-partition topic. Once the group has split the
partitions between them, every record produced is read exactly once, by the kcat that holds
its partition. kcat reports its assignments on stderr, one line per rebalance::

    % Group g rebalanced (memberid rdkafka-...): assigned: t [0], t [2]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from integration_support import (
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    GROUP_SETTINGS,
    Deadline,
    create_topic,
    produce_per_partition,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory

# Not a skip: `make test` installs kcat (make system-deps), so a missing kcat is a failure.
KCAT = shutil.which("kcat") or "kcat"
PARTITIONS = 4
RECORDS_PER_PARTITION = 100
STOP_TIMEOUT_S = 30.0
REBALANCED = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)$")


class KcatMember:
    """``kcat -G group topic`` printing ``partition offset value`` lines, unbuffered."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._assignment: set[int] = set()
        self._records: list[tuple[int, int, int]] = []
        self._stderr: list[str] = []
        command = [
            KCAT,
            "-b",
            bootstrap,
            "-G",
            group,
            "-u",
            "-f",
            r"%p %o %s\n",
            "-X",
            f"client.id={name}",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"session.timeout.ms={CLASSIC_SESSION_TIMEOUT_MS}",
            "-X",
            f"heartbeat.interval.ms={CLASSIC_HEARTBEAT_INTERVAL_MS}",
            topic,
        ]
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read_records, args=(self._proc.stdout,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(self._proc.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_records(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            partition, offset, value = line.rstrip(b"\n").split(b" ", 2)
            with self._lock:
                # payload() starts with the seq on ten digits
                self._records.append((int(partition), int(offset), int(value[:10])))

    def _read_stderr(self, stderr: IO[bytes]) -> None:
        for raw in stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            match = REBALANCED.search(line)
            with self._lock:
                self._stderr.append(line)
                if match is None:
                    continue
                partitions = {int(p) for p in re.findall(r"\[(\d+)\]", match.group(2))}
                if match.group(1) == "assigned":
                    self._assignment = partitions
                else:
                    self._assignment = set()

    @property
    def assignment(self) -> set[int]:
        with self._lock:
            return set(self._assignment)

    @property
    def records(self) -> list[tuple[int, int, int]]:
        with self._lock:
            return list(self._records)

    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self._stderr[-30:])

    def stop(self) -> int:
        """SIGTERM: kcat closes its consumer (leaving the group) and exits."""
        self._proc.terminate()
        try:
            code = self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.halt()
            raise AssertionError(
                f"{self.name} still running {STOP_TIMEOUT_S:.0f} s after SIGTERM"
            ) from None
        self._finish()
        return code

    def halt(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self._finish()

    def _finish(self) -> None:
        """Once the process is gone: read the rest of its output, close the pipes."""
        for reader in self._readers:
            reader.join(10)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._proc.stdout.close()
        self._proc.stderr.close()


def wait_for(
    condition: Callable[[], bool], deadline: Deadline, progress: Callable[[], str]
) -> None:
    while not condition():
        deadline.check(progress())
        time.sleep(0.05)


def test_two_kcat_members_split_the_partitions(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**GROUP_SETTINGS)
    group, topic = "kcat-group", "kcat-group-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    deadline = Deadline(60, "two kcat -G members")
    every = set(range(PARTITIONS))
    members = [KcatMember(broker.bootstrap, group, topic, "kcat-a")]
    try:
        first = members[0]
        wait_for(lambda: first.assignment == every, deadline, first.stderr)
        members.append(KcatMember(broker.bootstrap, group, topic, "kcat-b"))
        a, b = members

        def split() -> bool:
            held_a, held_b = a.assignment, b.assignment
            return (
                bool(held_a) and bool(held_b) and held_a | held_b == every and not held_a & held_b
            )

        wait_for(split, deadline, lambda: f"a: {a.stderr()}\nb: {b.stderr()}")
        deliveries = produce_per_partition(
            broker.bootstrap, topic, PARTITIONS, RECORDS_PER_PARTITION
        )
        total = len(deliveries.where)
        wait_for(
            lambda: len(a.records) + len(b.records) >= total,
            deadline,
            lambda: f"read {len(a.records)} + {len(b.records)} of {total}",
        )
        assignments = {m.name: m.assignment for m in members}
        codes = [m.stop() for m in members]
    finally:
        for member in members:
            member.halt()

    assert codes == [0, 0], (codes, a.stderr(), b.stderr())
    read = a.records + b.records
    assert sorted(read) == sorted((p, o, seq) for seq, (p, o) in deliveries.where.items())
    for member in members:
        partitions = {p for p, _, _ in member.records}
        assert partitions == assignments[member.name], (member.name, partitions, assignments)
