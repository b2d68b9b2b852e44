"""DescribeClientQuotas (48) and AlterClientQuotas (49): Kafka's quota administration
(`kafka-configs.sh --entity-type clients|users`), over the broker's `ClientQuotas`.

Entities and keys are Kafka's (broker/quotas.py). DescribeClientQuotas with an unknown
entity type answers INVALID_REQUEST for the whole request, as Kafka does; AlterClientQuotas
answers per entry, and applies the entries that are valid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ....broker.quotas import entity_of
from ....errors import ErrorCode, KafkaError
from ....types import RequestContext
from ..requests import AlterClientQuotasRequest, DescribeClientQuotasRequest

if TYPE_CHECKING:
    from ....broker.core import Broker


def handle_describe_client_quotas(
    broker: Broker, request: DescribeClientQuotasRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    components = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
    try:
        found = list(broker.client_quotas.describe(components, strict=bool(request.strict)))
    except KafkaError as exc:
        return {"error_code": exc.code, "error_message": str(exc), "entries": None}
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
            }
            for entity, values in found
        ],
    }


def handle_alter_client_quotas(
    broker: Broker, request: AlterClientQuotasRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    checked: list[tuple[Any, list[tuple[str, float, bool]]]] = []
    refused: dict[int, KafkaError] = {}
    for index, entry in enumerate(request.entries):
        try:
            entity = entity_of([(e.entity_type, e.entity_name) for e in entry.entity])
        except KafkaError as exc:
            refused[index] = exc
            continue
        checked.append((entity, [(o.key, float(o.value), bool(o.remove)) for o in entry.ops]))
    try:
        results = iter(
            broker.client_quotas.alter(checked, validate_only=bool(request.validate_only))
        )
    except KafkaError as exc:  # the store could not be written: nothing was
        results = iter([exc] * len(checked))
    entries = []
    for index, entry in enumerate(request.entries):
        error = refused.get(index) or next(results)
        entries.append(
            {
                "error_code": ErrorCode.none if error is None else error.code,
                "error_message": None if error is None else str(error),
                "entity": [
                    {"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity
                ],
            }
        )
    return {"entries": entries}
