"""Client quotas: Kafka's entities and precedence, checks, and the store on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from weirmq.broker.quotas import ANONYMOUS, ClientQuotas, InvalidQuotaError, entity_of

CLIENT, USER = "client-id", "user"


def _set(quotas: ClientQuotas, entity: list[tuple[str, str | None]], **values: float) -> None:
    ops = [(key, value, False) for key, value in values.items()]
    assert quotas.alter([(entity_of(entity), ops)], validate_only=False) == [None]


def test_kafkas_precedence(tmp_path: Path) -> None:
    quotas = ClientQuotas(tmp_path)
    _set(quotas, [(CLIENT, None)], producer_byte_rate=100, consumer_byte_rate=1000)
    _set(quotas, [(CLIENT, "app")], producer_byte_rate=200)
    _set(quotas, [(USER, None)], consumer_byte_rate=3000)
    _set(quotas, [(USER, ANONYMOUS), (CLIENT, "app")], request_percentage=50)
    assert quotas.resolve("app") == {
        "request_percentage": 50.0,  # /users/ANONYMOUS/clients/app
        "consumer_byte_rate": 3000.0,  # /users/<default> before any /clients entity
        "producer_byte_rate": 200.0,  # /clients/app
    }
    assert quotas.resolve("other") == {"consumer_byte_rate": 3000.0, "producer_byte_rate": 100.0}
    assert quotas.resolve("app", user="alice") == {
        "consumer_byte_rate": 3000.0,
        "producer_byte_rate": 200.0,
    }


def test_bad_entities_and_values_are_refused_per_entry(tmp_path: Path) -> None:
    quotas = ClientQuotas(tmp_path)
    with pytest.raises(InvalidQuotaError, match="unknown entity type"):
        entity_of([("ip", "1.2.3.4")])
    with pytest.raises(InvalidQuotaError, match="each once"):
        entity_of([(CLIENT, "a"), (CLIENT, "b")])
    good, bad_key, bad_value = (
        (entity_of([(CLIENT, "a")]), [("producer_byte_rate", 10.0, False)]),
        (entity_of([(CLIENT, "b")]), [("controller_mutation_rate", 10.0, False)]),
        (entity_of([(CLIENT, "c")]), [("consumer_byte_rate", -1.0, False)]),
    )
    results = quotas.alter([good, bad_key, bad_value], validate_only=False)
    assert results[0] is None
    assert isinstance(results[1], InvalidQuotaError) and "controller_mutation_rate" in str(
        results[1]
    )
    assert isinstance(results[2], InvalidQuotaError) and "positive" in str(results[2])
    assert list(quotas.entities()) == [entity_of([(CLIENT, "a")])]


def test_validate_only_changes_nothing_and_removing_the_last_key_drops_the_entity(
    tmp_path: Path,
) -> None:
    quotas = ClientQuotas(tmp_path)
    entity = entity_of([(CLIENT, "a")])
    assert quotas.alter([(entity, [("producer_byte_rate", 5.0, False)])], validate_only=True) == [
        None
    ]
    assert quotas.entities() == {}
    _set(quotas, [(CLIENT, "a")], producer_byte_rate=5)
    assert quotas.alter([(entity, [("producer_byte_rate", 0.0, True)])], validate_only=False) == [
        None
    ]
    assert quotas.entities() == {}


def test_the_store_survives_reopening(tmp_path: Path) -> None:
    _set(ClientQuotas(tmp_path), [(USER, "bob"), (CLIENT, None)], consumer_byte_rate=7)
    reopened = ClientQuotas(tmp_path)
    assert reopened.resolve("x", user="bob") == {"consumer_byte_rate": 7.0}


def test_describe_matches_components(tmp_path: Path) -> None:
    quotas = ClientQuotas(tmp_path)
    _set(quotas, [(CLIENT, "a")], producer_byte_rate=1)
    _set(quotas, [(CLIENT, None)], producer_byte_rate=2)
    _set(quotas, [(USER, "u"), (CLIENT, "a")], producer_byte_rate=3)

    def names(components: list[tuple[str, int, str | None]], strict: bool) -> list[object]:
        return [entity for entity, _ in quotas.describe(components, strict=strict)]

    assert names([(CLIENT, 0, "a")], strict=True) == [entity_of([(CLIENT, "a")])]
    assert names([(CLIENT, 1, None)], strict=False) == [entity_of([(CLIENT, None)])]
    assert len(names([(CLIENT, 2, None)], strict=False)) == 3
    assert len(names([(CLIENT, 2, None)], strict=True)) == 2
    with pytest.raises(InvalidQuotaError):
        names([("ip", 2, None)], strict=False)


def test_limits_in_the_flow_controllers_units_follow_changes(tmp_path: Path) -> None:
    quotas = ClientQuotas(tmp_path)
    assert quotas.limits("app") == {}
    _set(quotas, [(CLIENT, "app")], producer_byte_rate=1000, request_percentage=50)
    assert quotas.limits("app") == {"produce_bytes": 1000.0, "request_time": 500.0}
