"""WeirMQ against RabbitMQ: one scripted pika scenario, two servers, equal observations.

The scenario (amqp_scenarios.BasicScenario) declares, binds, publishes with confirms and
mandatory, gets, consumes, acks, nacks and rejects, and meets the refusals clients rely on
(404, 405, 406, 403, 312). It runs against the `rabbitmq` fixture (a real RabbitMQ node,
whose answers test_rabbitmq_oracle.py checks against RabbitMQ's documentation) and against
a WeirMQ broker process, and the two lists of observations must be equal. Nothing is
special-cased: any difference fails, and the message lists every step where the servers
diverge (the first one is where they start to; later ones may follow from it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from amqp_scenarios import Observation, run_scenario

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration


def differences(weirmq: list[Observation], rabbitmq: list[Observation]) -> str:
    lines = []
    for ours, theirs in zip(weirmq, rabbitmq, strict=False):
        if ours != theirs:
            lines.append(f"- {theirs.step!r}: RabbitMQ {theirs.value!r}, WeirMQ {ours.value!r}"
                         if ours.step == theirs.step else
                         f"- steps out of line: RabbitMQ {theirs.step!r}, WeirMQ {ours.step!r}")
    if len(weirmq) != len(rabbitmq):
        lines.append(f"- {len(rabbitmq)} observations from RabbitMQ, {len(weirmq)} from WeirMQ")
    return "\n".join(lines)


def test_weirmq_answers_the_scenario_as_rabbitmq_does(
    broker: BrokerProcess, rabbitmq: int
) -> None:
    assert broker.amqp is not None
    reference = run_scenario(rabbitmq)
    observed = run_scenario(int(broker.amqp.rpartition(":")[2]))
    assert observed == reference, "WeirMQ differs from RabbitMQ:\n" + differences(
        observed, reference
    )
