"""The typed request views (protocols/kafka/requests.py) against kio's classes.

For every API with a view and every version we advertise: after `conform`, every field
the view declares, at every depth, is readable on the decoded class (a field of that
version, or an `ABSENT` value for versions without it); and every `ABSENT` path names a
field that some advertised version really has, so a misspelt name fails here instead of
silently reading a default.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from weirmq.protocols.kafka import requests
from weirmq.protocols.kafka.dispatch import API_VERSIONS
from weirmq.protocols.kafka.wire import messages

Path = tuple[str, ...]


def view_fields(view: type[Any], path: Path = ()) -> Iterator[tuple[Path, type[Any] | None]]:
    """Every (path, nested view or None) a typed view declares, depth first."""
    for name, hint in typing.get_type_hints(view).items():
        nested = nested_view(hint)
        yield (*path, name), nested
        if nested is not None:
            yield from view_fields(nested, (*path, name))


def nested_view(hint: Any) -> type[Any] | None:
    """The Protocol a field holds (alone, in a Sequence, or optional), else None."""
    for arg in (hint, *typing.get_args(hint)):
        inner = (typing.get_args(arg) or (None,))[0]
        for candidate in (arg, inner):
            if isinstance(candidate, type) and getattr(candidate, "_is_protocol", False):
                return candidate
    return None


def advertised(api_key: int) -> range:
    api = API_VERSIONS[api_key]
    return range(api.min_version, api.max_version + 1)


def kio_class_at(cls: type[Any], path: Path) -> type[Any] | None:
    for name in path:
        hints = typing.get_type_hints(cls)
        if name not in hints:
            return None
        found = requests.entity_class(hints[name])
        if found is None:
            return None
        cls = found
    return cls


CASES = [
    (key, version) for key in sorted(requests.PROTOCOLS) for version in advertised(key)
]


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_every_field_of_the_view_is_readable_on_every_version(api_key: int, version: int) -> None:
    cls = messages.request_class(api_key, version)
    requests.conform(api_key, cls)
    absent = requests.ABSENT.get(api_key, {})
    for path, _nested in view_fields(requests.PROTOCOLS[api_key]):
        owner = kio_class_at(cls, path[:-1])
        if owner is None:  # inside a container this version lacks: it reads empty
            assert any(path[:i] in absent for i in range(1, len(path))), path
            continue
        assert hasattr(owner, path[-1]), (
            f"{cls.__name__} v{version} has no {'.'.join(path)} and ABSENT gives it no value"
        )


@pytest.mark.parametrize("api_key", sorted(requests.ABSENT))
def test_every_absent_path_names_a_field_some_version_has(api_key: int) -> None:
    for path in requests.ABSENT[api_key]:
        classes = [messages.request_class(api_key, v) for v in advertised(api_key)]
        owners = [kio_class_at(cls, path[:-1]) for cls in classes]
        names = {f.name for o in owners if o is not None for f in dataclasses.fields(o)}
        assert path[-1] in names, f"no advertised version of API {api_key} has {'.'.join(path)}"


def test_a_decoded_old_version_reads_the_absent_value() -> None:
    """Fetch v4 has neither sessions nor the leader-epoch fence; the view reads Kafka's
    values for them, and the instance's own fields are untouched."""
    cls = messages.request_class(1, 4)
    requests.conform(1, cls)
    partition_cls = kio_class_at(cls, ("topics", "partitions"))
    assert partition_cls is not None
    fields = {f.name for f in dataclasses.fields(partition_cls)}
    assert "current_leader_epoch" not in fields
    assert partition_cls.current_leader_epoch == -1  # type: ignore[attr-defined]
    assert cls.session_epoch == -1  # type: ignore[attr-defined]
    assert "session_epoch" not in {f.name for f in dataclasses.fields(cls)}
