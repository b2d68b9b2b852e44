"""The shared vocabulary of every layer: partition names, offsets, epochs, time, requests.

Nothing here does anything; these are the words the other packages use to talk to each
other, so they live below all of them (this module imports nothing of WeirMQ).

Time
----
The broker has one clock and one timer service, both injected:

- a `Clock` is a callable returning wall-clock milliseconds. Record timestamps, producer
  and offset expiry, group sessions, fetch long-poll deadlines and (later) share-record
  locks, delayed deliveries and throttles all read it, so a test that steps a manual clock
  steps all of them together;
- `Timers` runs a callback once the clock reaches a deadline. The server's implementation
  sits on the asyncio loop; `weirmq.testing.ManualTimers` fires only when a test advances
  its clock, so a fetch long poll or a session timeout is tested without sleeping.

Deadlines are absolute clock milliseconds, never durations, so they can be compared and
stored without knowing when they were set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, NewType, Protocol

Offset = NewType("Offset", int)
"""A record's position in its partition's log (Kafka's offset)."""
LeaderEpoch = NewType("LeaderEpoch", int)
"""Incremented at every change of a partition's leader (KIP-101); 0 on a single broker."""
PartitionId = NewType("PartitionId", int)
"""A partition's index within its topic, from 0."""

NO_OFFSET = Offset(-1)
"""Kafka's "no offset" (-1), in responses and in commit lookups."""


class TopicPartition(NamedTuple):
    """A topic's partition. A tuple, so `("orders", 0)` compares and hashes equal to it."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Clock = Callable[[], int]
"""Wall-clock milliseconds; see the module docstring."""


class Timer(Protocol):
    """A scheduled callback; `cancel` is idempotent and harmless after it fired."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """Runs callbacks at clock deadlines; see the module docstring."""

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> Timer:
        """Run `callback` once the clock reaches `deadline_ms` (at once if it has)."""
        ...


class RequestContext(NamedTuple):
    """Who is asking: passed with every request from a protocol adapter to the broker.

    `client_id` is what the client calls itself (Kafka's client.id, AMQP's connection
    name), `host` its address as Kafka shows it in group descriptions ("/127.0.0.1"),
    `protocol` the adapter's name ("kafka", later "amqp" and "sqs"). A named tuple: one
    is made per request, and a tuple is the cheapest immutable record to make."""

    client_id: str = ""
    host: str = ""
    protocol: str = "kafka"


NO_CONTEXT = RequestContext(protocol="internal")
"""The broker's own writes (the offsets log, later dead letters and routing)."""
