"""The OpenAPI 3.0 document of the admin API, served at ``/openapi.json``.

It is written by hand, as Python data, next to the code it describes (`weirmq.admin.http`
and `weirmq.admin.views`) rather than generated from it: the document is the contract that
clients and the fuzz test (schemathesis) hold the server to, so it must be able to say
"this is wrong", which a description derived from the code never would.

Schemas are strict on purpose: every object lists all of its properties, marks them
required and forbids others (``additionalProperties: false``), and every status an
operation can answer is listed. The fuzz test validates each response against this, so a
field added to a view without being added here fails a test. The settings schema is the
one exception to writing by hand: it is derived from the settings table
(`weirmq.broker.settings.SETTING_SPECS`), which already states each setting's type and
bounds, so the two cannot disagree.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from weirmq import __version__
from weirmq.broker.configs import EXCHANGE_TYPES
from weirmq.broker.core import PARTITIONS_MAX
from weirmq.settings import (
    ACCESS_KEYS,
    ADMIN_TOKEN,
    ADVERTISED_ADDRESS,
    ALLOWED_HOSTS,
    BOOLEAN,
    DIRECTORY,
    INTEGER,
    LISTEN_ADDRESS,
    NAMES,
    OPTIONAL_LISTEN_ADDRESS,
    SETTING_SPECS,
    SQS_ACCOUNT_ID,
    SQS_REGION,
    USERS,
    VHOSTS,
    Settings,
    SettingSpec,
)

from . import operations
from .history import HISTORY_SAMPLES_MAX
from .views import CONFIG_SOURCES

Schema = dict[str, Any]

OPENAPI_VERSION = "3.0.3"
TOPIC_NAME_PATTERN = "^[a-zA-Z0-9._-]+$"
TOPIC_NAME_CHARS_MAX = 249
INT32_MAX = 2**31 - 1
# The routing core's bounds (weirmq.routing.limits, which this package may not import; a
# test holds these equal to them). Characters, where the core counts UTF-8 bytes for keys:
# a longer text is refused either way, a shorter one may still be.
BINDING_KEY_CHARS_MAX = 255
BINDING_ARGUMENTS_MAX = 64
ARGUMENT_VALUE_CHARS_MAX = 4_096
EXPRESSION_CHARS_MAX = 4_096


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Schema], description: str = "") -> Schema:
    """A closed object: every property required, no others allowed."""
    schema: Schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _integer(minimum: int = 0, maximum: int | None = None, fmt: str = "int64") -> Schema:
    schema: Schema = {"type": "integer", "format": fmt, "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


_STRING: Schema = {"type": "string"}
_NULLABLE_STRING: Schema = {"type": "string", "nullable": True}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
_TOPIC_NAME: Schema = {
    "type": "string",
    "minLength": 1,
    "maxLength": TOPIC_NAME_CHARS_MAX,
    "pattern": TOPIC_NAME_PATTERN,
    "description": "Kafka's rules: 1 to 249 of [a-zA-Z0-9._-], not '.' or '..'.",
}

# --- schemas --------------------------------------------------------------------------------

_ERROR = _object(
    {
        "error": _object(
            {
                "code": {
                    "type": "string",
                    "description": "Upper-case name: a Kafka error code's name (such as "
                    "TOPIC_ALREADY_EXISTS) or one of the API's own (MALFORMED_JSON, "
                    "INVALID_REQUEST, NOT_FOUND, METHOD_NOT_ALLOWED, PAYLOAD_TOO_LARGE, "
                    "EXCHANGE_CONFLICT, EXCHANGE_IN_USE, BINDING_NOT_FOUND, HOST_NOT_ALLOWED, "
                    "ORIGIN_NOT_ALLOWED, UNSUPPORTED_MEDIA_TYPE, UNAUTHORIZED, THROTTLED).",
                },
                "message": {"type": "string", "description": "What was wrong, for people."},
            }
        )
    },
    "Every error answer has this shape.",
)

_HEALTH = _object(
    {
        "status": {
            "type": "string",
            "enum": ["ok", "degraded", "stopping"],
            "description": "degraded: some partition is offline; stopping: shutting down.",
        },
        "node_id": _integer(0, INT32_MAX, "int32"),
        "cluster_id": _STRING,
        "version": _STRING,
        "uptime_ms": _integer(),
        "offline_partitions": _integer(),
    }
)


_SETTING_TYPES = {field.name: str(field.type) for field in dataclasses.fields(Settings)}
"""Each `Settings` field's annotation, as text (the module uses postponed annotations)."""


def _setting_schema(spec: SettingSpec) -> Schema:
    if spec.kind is INTEGER:
        schema: Schema = {"type": "integer", "format": "int64"}
        if spec.minimum is not None:
            schema["minimum"] = spec.minimum
        if spec.maximum is not None:
            schema["maximum"] = spec.maximum
    elif spec.kind is BOOLEAN:
        schema = {"type": "boolean"}
    elif spec.kind in (DIRECTORY, LISTEN_ADDRESS, SQS_REGION, SQS_ACCOUNT_ID):
        schema = {"type": "string"}
    elif spec.kind in (ADVERTISED_ADDRESS, OPTIONAL_LISTEN_ADDRESS):
        schema = {"type": "string", "nullable": True}
    elif spec.kind is ADMIN_TOKEN:  # a secret: only whether it is set
        schema = {"type": "string", "nullable": True, "enum": ["(set)", None]}
    elif spec.kind in (ALLOWED_HOSTS, NAMES, VHOSTS, USERS, ACCESS_KEYS):
        # USERS and ACCESS_KEYS: the names, never the passwords or secret keys
        schema = {"type": "array", "items": {"type": "string"}}
    elif _SETTING_TYPES[spec.name] == "str":
        # A kind of its own that holds plain text (a `_token_kind` such as a policy name):
        # the value is shown as it is, a string, whatever its checks.
        schema = {"type": "string"}
    else:  # a new kind of setting: describe it here (a test fetches this document)
        raise AssertionError(f"setting {spec.name!r} has a kind the OpenAPI schema lacks")
    return {**schema, "description": spec.meaning}


def _settings() -> Schema:
    return _object(
        {spec.name: _setting_schema(spec) for spec in SETTING_SPECS},
        "Every setting the broker runs with (see docs/configuration.md).",
    )


def _broker() -> Schema:
    return _object(
        {
            "node_id": _integer(0, INT32_MAX, "int32"),
            "cluster_id": _STRING,
            "version": _STRING,
            "advertised_address": {
                "type": "string",
                "description": "HOST:PORT Kafka clients are told to connect to.",
            },
            "data_dir": _STRING,
            "uptime_ms": _integer(),
            "connections": _object(
                {
                    "open": _integer(),
                    "accepted_total": _integer(),
                    "closed_for_errors_total": _integer(),
                },
                "Kafka connections.",
            ),
            "topics": _integer(),
            "partitions": _integer(),
            "flow": _FLOW,
            "settings": _ref("Settings"),
        }
    )


_FLOW = _object(
    {
        "resources": {
            "type": "array",
            "description": "The guarded resources (memory, disk, backlog:TOPIC), by name.",
            "items": _object(
                {
                    "name": _STRING,
                    "state": {"type": "string", "enum": ["free", "throttled", "blocked"]},
                    "level": {**_integer(), "description": "In the resource's unit (bytes)."},
                    "low": {**_integer(), "description": "Throttling starts above this."},
                    "high": {**_integer(), "description": "Publishes are held back here."},
                    "resume": {**_integer(), "description": "A blocked resource frees here."},
                    "ratio": {"type": "number", "minimum": 0, "maximum": 1},
                }
            ),
        },
        "throttled_requests_total": _integer(),
        "throttle_seconds_total": {"type": "number", "minimum": 0},
        "refused_publishes_total": {
            **_integer(),
            "description": "Publishes refused after waiting their timeout for a resource.",
        },
    },
    "Back-pressure: the flow controller's resources and what it asked of clients.",
)


_TOPIC_SUMMARY_PROPERTIES: dict[str, Schema] = {
    "name": _STRING,
    "topic_id": {"type": "string", "format": "uuid"},
    "partition_count": _integer(1, INT32_MAX, "int32"),
    "size_bytes": _integer(),
    "records": {
        **_integer(),
        "description": "Log end minus log start offset, summed over the partitions.",
    },
    "configs": {**_STRING_MAP, "description": "The topic's config overrides."},
}

_PARTITION = _object(
    {
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "log_start_offset": _integer(),
        "log_end_offset": {
            **_integer(),
            "description": "The next offset to be written; also the high watermark.",
        },
        "size_bytes": _integer(),
        "segments": _integer(),
        "offline_reason": {
            **_NULLABLE_STRING,
            "description": "Why the partition is offline, or null while it is served.",
        },
    }
)

_CONFIG_ENTRY = _object(
    {
        "name": _STRING,
        "value": {**_NULLABLE_STRING, "description": "null when unset or sensitive."},
        "source": {"type": "string", "enum": sorted(set(CONFIG_SOURCES.values()))},
        "read_only": {"type": "boolean"},
        "sensitive": {"type": "boolean"},
        "type": {"type": "string", "description": "Kafka's config type: LONG, STRING, ..."},
        "documentation": _STRING,
    }
)

GROUP_STATES = [
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Assigning",
    "Reconciling",
    "Stable",
    "Dead",
]
"""Kafka's state names: classic groups go through PreparingRebalance and
CompletingRebalance, consumer (KIP-848) groups through Assigning and Reconciling."""

_NULLABLE_OFFSET: Schema = {**_integer(), "nullable": True}
_LAG: Schema = {
    "type": "integer",
    "format": "int64",
    "nullable": True,
    "description": "Log end offset minus committed offset (negative if the group committed "
    "past the end); null unless both are known.",
}

_GROUP_SUMMARY_PROPERTIES: dict[str, Schema] = {
    "group_id": _STRING,
    "kind": {
        "type": "string",
        "enum": ["classic", "consumer"],
        "description": "classic: JoinGroup and SyncGroup; consumer: KIP-848.",
    },
    "state": {"type": "string", "enum": GROUP_STATES},
    "protocol_type": {
        "type": "string",
        "description": '"consumer" for Kafka consumers; empty for a group that only holds '
        "offsets (committed by consumers that assign partitions themselves).",
    },
    "protocol": {
        "type": "string",
        "description": "The partition assignor (range, cooperative-sticky, uniform, ...); "
        "empty when none is chosen.",
    },
    "generation": {
        **_integer(0, INT32_MAX, "int32"),
        "description": "Classic: the generation id. Consumer: the group epoch.",
    },
    "member_count": _integer(0, INT32_MAX, "int32"),
    "lag": {
        **_LAG,
        "description": "Sum of the lags of its partitions that have one; null if none has.",
    },
}

_TOPIC_PARTITION = _object({"topic": _STRING, "partition": _integer(0, INT32_MAX, "int32")})

_GROUP_MEMBER = _object(
    {
        "member_id": _STRING,
        "group_instance_id": {
            **_NULLABLE_STRING,
            "description": "A static member's group.instance.id; null for a dynamic one.",
        },
        "client_id": _STRING,
        "client_host": {"type": "string", "description": "As Kafka gives it: /127.0.0.1."},
        "assignment": {
            "type": "array",
            "items": _TOPIC_PARTITION,
            "description": "The partitions the member owns now.",
        },
    }
)

_GROUP_PARTITION = _object(
    {
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "committed_offset": {
            **_NULLABLE_OFFSET,
            "description": "The group's committed offset (the next record it will read); "
            "null if it has committed none.",
        },
        "log_end_offset": {
            **_NULLABLE_OFFSET,
            "description": "null if the partition no longer exists.",
        },
        "lag": _LAG,
        "member_id": {**_NULLABLE_STRING, "description": "The member that owns it now."},
    },
    "A partition the group has committed an offset for or owns.",
)

_SHARE_PARTITION = _object(
    {
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "start_offset": {
            **_integer(),
            "description": "Every record below is acknowledged or archived.",
        },
        "end_offset": {**_integer(), "description": "The first offset never delivered."},
        "high_watermark": _integer(),
        "available": {
            **_integer(),
            "description": "Records that may be delivered now or after their retry backoff, "
            "up to the high watermark.",
        },
        "acquired": {**_integer(), "description": "Records locked to a member."},
        "acknowledged": {**_integer(), "description": "Accepted records in the window."},
        "archived": {**_integer(), "description": "Archived records in the window."},
        "oldest_unacknowledged_age_ms": {
            **_NULLABLE_OFFSET,
            "description": "Age, from its timestamp, of the record at the start offset; "
            "null when there is none.",
        },
        "delivered": {**_integer(), "description": "Deliveries since the broker started."},
        "accepted": _integer(),
        "released": _integer(),
        "rejected": _integer(),
        "dead_lettered": {
            **_integer(),
            "description": "Records archived by a reject or the delivery limit.",
        },
    },
    "A share group's delivery state on one partition (share groups only).",
)

_CREATE_TOPIC: Schema = {
    "type": "object",
    "properties": {
        "name": _TOPIC_NAME,
        "partitions": {
            **_integer(1, PARTITIONS_MAX, "int32"),
            "description": "Default: the broker's default_partitions setting.",
        },
        "configs": {**_STRING_MAP, "description": "Config overrides, such as retention.ms."},
    },
    "required": ["name"],
    "additionalProperties": False,
    "example": {"name": "orders", "partitions": 3, "configs": {"retention.ms": "86400000"}},
}

_ALTER_CONFIGS: Schema = {
    "type": "object",
    "properties": {
        "set": {**_STRING_MAP, "description": "Overrides to set (name to value)."},
        "delete": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Overrides to remove: the config goes back to its default.",
        },
    },
    "additionalProperties": False,
    "example": {"set": {"retention.ms": "3600000"}, "delete": ["segment.bytes"]},
}

_EXCHANGE_TYPE: Schema = {
    "type": "string",
    "enum": list(EXCHANGE_TYPES),
    "description": "direct: the key equals the binding key; topic: RabbitMQ's patterns "
    "(`*` one word, `#` any); fanout: every binding; headers: the binding's arguments "
    "against the record's headers (x-match all or any); content: an SQL-like expression "
    "over the headers.",
}
_ALTERNATE: Schema = {
    **_TOPIC_NAME,
    "nullable": True,
    "description": "The exchange that gets the records this one's bindings do not match "
    "(it need not exist); null: none.",
}
_UNROUTABLE: Schema = {
    "type": "string",
    "enum": ["drop", "reject"],
    "description": "What happens to a record no binding routes, even through the alternate: "
    "dropped (counted), or the whole write refused with INVALID_RECORD.",
}

_EXCHANGE_SUMMARY_PROPERTIES: dict[str, Schema] = {
    "name": _STRING,
    "type": _EXCHANGE_TYPE,
    "alternate": _ALTERNATE,
    "unroutable": _UNROUTABLE,
    "partition_count": {
        **_integer(1, INT32_MAX, "int32"),
        "description": "Partitions of the exchange's input log (its topic).",
    },
    "binding_count": {**_integer(), "description": "Bindings leaving this exchange."},
}

_ARGUMENT_VALUE: Schema = {
    "anyOf": [
        {"type": "string", "maxLength": ARGUMENT_VALUE_CHARS_MAX, "nullable": True},
        {"type": "number"},
        {"type": "boolean"},
    ],
    "description": "A string, number, boolean or null; compared with a header's value by "
    "kind (1 and 1.0 are equal, 1 and true are not).",
}
_ARGUMENTS: Schema = {
    "type": "object",
    "maxProperties": BINDING_ARGUMENTS_MAX,
    "additionalProperties": _ARGUMENT_VALUE,
    "description": "For a headers exchange, the conditions on the record's headers, with "
    '"x-match": "all" (the default), "any", "all-with-x" or "any-with-x".',
}
_BINDING_KEY: Schema = {
    "type": "string",
    "maxLength": BINDING_KEY_CHARS_MAX,
    "description": "direct: the routing key to match; topic: a pattern of dot-separated words "
    "(`*` one word, `#` any number). At most 255 bytes of UTF-8.",
}
_EXPRESSION: Schema = {
    "type": "string",
    "maxLength": EXPRESSION_CHARS_MAX,
    "nullable": True,
    "description": "content exchanges only: an SQL-92 predicate over the record's headers, "
    "such as \"region = 'eu' AND amount > 100\".",
}

_BINDING = _object(
    {
        "source": {**_STRING, "description": "The exchange the binding leaves from."},
        "destination": {**_STRING, "description": "A topic, or an exchange."},
        "destination_kind": {
            "type": "string",
            "enum": ["topic", "exchange"],
            "description": "topic: records are appended to it; exchange: routing goes on there.",
        },
        "key": _BINDING_KEY,
        "arguments": _ARGUMENTS,
        "expression": _EXPRESSION,
    }
)

_EXCHANGE_STATS = _object(
    {
        "routed_records": {
            **_integer(),
            "description": "Copies appended to destination topics (a record routed to "
            "three topics counts three).",
        },
        "unroutable_records": {
            **_integer(),
            "description": "Records no binding routed, dropped (under `reject` they are "
            "refused, never written, and not counted).",
        },
        "alternate_records": {
            **_integer(),
            "description": "Records that went through an alternate exchange.",
        },
        "failed_records": {
            **_integer(),
            "description": "Copies a destination refused (its log offline); logged.",
        },
    },
    "Totals since the broker started.",
)

_DECLARE_EXCHANGE: Schema = {
    "type": "object",
    "properties": {
        "name": _TOPIC_NAME,
        "type": _EXCHANGE_TYPE,
        "partitions": {
            **_integer(1, PARTITIONS_MAX, "int32"),
            "description": "Partitions of the exchange's input log. Default: the broker's "
            "default_partitions setting; compared only when given.",
        },
        "alternate": _ALTERNATE,
        "unroutable": {**_UNROUTABLE, "default": "drop"},
    },
    "required": ["name", "type"],
    "additionalProperties": False,
    "example": {"name": "events", "type": "topic", "partitions": 2, "unroutable": "drop"},
}

_BINDING_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "destination": {
            **_TOPIC_NAME,
            "description": "A topic, or an exchange (routing goes on there).",
        },
        "key": {**_BINDING_KEY, "default": ""},
        "arguments": {**_ARGUMENTS, "default": {}},
        "expression": {**_EXPRESSION, "default": None},
    },
    "required": ["destination"],
    "additionalProperties": False,
    "description": "A binding is its fields: binding twice is binding once, and a binding "
    "is removed by sending the same fields.",
    "example": {"destination": "orders", "key": "eu.#"},
}

_OFFSETS: Schema = {
    "type": "object",
    "additionalProperties": {"type": "integer", "minimum": 0},
    "description": "Offsets by partition number (keys are partition numbers as text).",
    "example": {"0": 0},
}
_REPLAY_REQUEST: Schema = {
    **_BINDING_REQUEST,
    "properties": {
        **_BINDING_REQUEST["properties"],
        "from_timestamp_ms": {
            "type": "integer",
            "description": "Start, in each partition, at the first record at or after this "
            "time. Without it (and without from_offsets): the log start.",
        },
        "from_offsets": _OFFSETS,
        "to_offsets": {
            **_OFFSETS,
            "description": "Stop before these offsets. Without them: where routing was when "
            "the binding was made, so the binding gets nothing twice.",
        },
    },
    "description": "One binding of the exchange (its fields) and the range to re-route.",
    "example": {"destination": "orders", "key": "eu.#"},
}
_REPLAY_RESULT: Schema = _object(
    {
        "exchange": {"type": "string"},
        "binding": _ref("Binding"),
        "ranges": {
            "type": "array",
            "items": _object(
                {
                    "partition": {"type": "integer", "minimum": 0},
                    "start_offset": {"type": "integer", "minimum": 0},
                    "end_offset": {"type": "integer", "minimum": 0},
                }
            ),
        },
        "records_read": {"type": "integer", "minimum": 0},
        "records_routed": {"type": "integer", "minimum": 0},
    },
    "What was re-routed: per partition [start_offset, end_offset), the records read there "
    "and the copies written into the binding's destination.",
)

# --- the console's endpoints (weirmq.admin.operations) --------------------------------------

_COUNT: Schema = _integer()
_CONNECTIONS = _object(
    {"kafka": _COUNT, "amqp": _COUNT, "sqs": _COUNT, "total": _COUNT},
    "Open connections per protocol (0 for a protocol that is off), and in all.",
)
_RATE: Schema = {"type": "number", "minimum": 0}
_HISTORY_SAMPLE = _object(
    {
        "at_ms": {**_integer(), "description": "End of the interval (epoch milliseconds)."},
        "bytes_in_per_s": {**_RATE, "description": "Record-batch bytes appended."},
        "bytes_out_per_s": {**_RATE, "description": "Record-batch bytes Kafka fetches sent."},
        "messages_in_per_s": {**_RATE, "description": "Records appended."},
        "messages_out_per_s": {
            **_RATE,
            "description": "Records sent by Kafka Fetch and ShareFetch (whole batches).",
        },
        "connections": {**_COUNT, "description": "Open at the end of the interval."},
    }
)
_OVERVIEW = _object(
    {
        "version": _STRING,
        "node_id": _integer(0, INT32_MAX, "int32"),
        "cluster_id": _STRING,
        "uptime_ms": _integer(),
        "status": {"type": "string", "enum": ["ok", "degraded", "stopping"]},
        "connections": _ref("Connections"),
        "topics": _COUNT,
        "partitions": _COUNT,
        "groups": _COUNT,
        "history": _object(
            {
                "interval_ms": _integer(1),
                "samples": {
                    "type": "array",
                    "maxItems": HISTORY_SAMPLES_MAX,
                    "items": _ref("HistorySample"),
                    "description": "Oldest first; the last ten minutes at most.",
                },
            }
        ),
    },
    "The console's first page: status, counts, connections and recent traffic.",
)
_QUEUE = _object(
    {
        "group": _STRING,
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "available": _COUNT,
        "in_flight": {**_COUNT, "description": "Delivered and not yet acknowledged."},
        "oldest_unacknowledged_age_ms": _NULLABLE_OFFSET,
        "delivered": {**_COUNT, "description": "Deliveries since the broker started."},
        "dead_lettered": {**_COUNT, "description": "Dead letters since the broker started."},
        "dead_letter_topic": {
            **_NULLABLE_STRING,
            "description": "The group's errors.deadletterqueue.topic.name; null if none.",
        },
    },
    "One share-partition of a share group.",
)
_PAYLOAD: Schema = {
    **_object(
        {
            "base64": {"type": "string", "format": "byte"},
            "text": {
                **_NULLABLE_STRING,
                "description": "The bytes as UTF-8 text; null when they are not valid UTF-8.",
            },
        }
    ),
    "nullable": True,
}
_MESSAGE = _object(
    {
        "offset": _integer(),
        "timestamp_ms": {"type": "integer", "format": "int64"},
        "key": _PAYLOAD,
        "value": _PAYLOAD,
        "headers": {
            "type": "array",
            "items": _object({"key": _STRING, "value": _PAYLOAD}),
        },
    }
)
_MESSAGE_PAGE = _object(
    {
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "log_start_offset": _integer(),
        "log_end_offset": _integer(),
        "next_offset": {
            **_integer(),
            "description": "Where the next page starts (offset=next_offset).",
        },
        "messages": {
            "type": "array",
            "maxItems": operations.BROWSE_LIMIT_MAX,
            "items": _ref("Message"),
        },
    }
)
_PRODUCE_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "value": {"type": "string", "description": "Written as its UTF-8 bytes."},
        "key": {**_NULLABLE_STRING, "description": "Also chooses the partition (murmur2)."},
        "partition": _integer(0, INT32_MAX, "int32"),
        "headers": {
            **_STRING_MAP,
            "maxProperties": operations.PRODUCE_HEADERS_MAX,
        },
    },
    "required": ["value"],
    "additionalProperties": False,
    "example": {"value": "hello", "key": "k1"},
}
_PRODUCE_RESULT = _object(
    {
        "topic": _STRING,
        "partition": _integer(0, INT32_MAX, "int32"),
        "offset": {
            **_NULLABLE_OFFSET,
            "description": "null when the record was delayed (weirmq.delay.ms): it gets its "
            "offset when delivered.",
        },
    }
)
_RESET_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "enum": ["earliest", "latest", "timestamp", "offset", "shift"]},
        "value": {
            "type": "integer",
            "format": "int64",
            "description": "timestamp: epoch ms; offset: the offset; shift: the delta. "
            "Required for those three.",
        },
        "topic": _STRING,
        "partitions": {"type": "array", "items": _integer(0, INT32_MAX, "int32")},
        "dry_run": {"type": "boolean", "default": False},
    },
    "required": ["to"],
    "additionalProperties": False,
    "example": {"to": "earliest", "dry_run": True},
}
_RESET_RESULT = _object(
    {
        "group": _STRING,
        "dry_run": {"type": "boolean"},
        "partitions": {
            "type": "array",
            "items": _object(
                {
                    "topic": _STRING,
                    "partition": _integer(0, INT32_MAX, "int32"),
                    "current": _NULLABLE_OFFSET,
                    "new": _integer(),
                }
            ),
        },
    }
)
_TRIM_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "partition": _integer(0, INT32_MAX, "int32"),
        "before_offset": {
            **_integer(-1),
            "description": "Delete the records before this offset; -1: the log end.",
        },
    },
    "required": ["before_offset"],
    "additionalProperties": False,
    "example": {"before_offset": 0},
}
_TRIM_RESULT = _object(
    {
        "topic": _STRING,
        "partitions": {
            "type": "array",
            "items": _object(
                {"partition": _integer(0, INT32_MAX, "int32"), "log_start_offset": _integer()}
            ),
        },
    }
)
_REDRIVE_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "to": {**_TOPIC_NAME, "description": "The topic the records go back to."},
        "dry_run": {"type": "boolean", "default": False},
    },
    "required": ["to"],
    "additionalProperties": False,
    "example": {"to": "orders", "dry_run": True},
}
_REDRIVE_RESULT = _object(
    {
        "moved": {
            **_integer(0, operations.REDRIVE_RECORDS_MAX),
            "description": "Records copied and deleted (a dry run: that would be).",
        },
        "from": _STRING,
        "to": _STRING,
        "remaining": {
            **_integer(),
            "description": "Records left in the source (offsets, an upper bound): call again.",
        },
        "dry_run": {"type": "boolean"},
    }
)


# --- operations -----------------------------------------------------------------------------


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return _json(_ref("Error"), description)


_NAME_PARAMETER: Schema = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": _TOPIC_NAME,
    "description": "Topic name.",
    "example": "orders",
}
_PARTITION_PARAMETER: Schema = {
    "name": "partition",
    "in": "path",
    "required": True,
    "schema": _integer(0, INT32_MAX, "int32"),
    "description": "Partition index, from 0.",
    "example": 0,
}
_GROUP_PARAMETER: Schema = {
    "name": "group",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
    "description": "Group id (URL-encoded: a group id may hold any character).",
    "example": "billing",
}
_UNKNOWN_TOPIC = _error("No such topic (UNKNOWN_TOPIC_OR_PARTITION).")
_UNKNOWN_GROUP = _error("No such group (GROUP_ID_NOT_FOUND).")
_GROUP_CONFIGS_EXAMPLE: Schema = {
    "set": {"share.delivery.count.limit": "3", "share.record.lock.duration.ms": "60000"},
    "delete": ["share.auto.offset.reset"],
}
_BAD_GROUP_CONFIGS = _error(
    "The body is not JSON (MALFORMED_JSON) or has the wrong shape (INVALID_REQUEST), or the "
    "broker refuses the change (INVALID_CONFIG: an unknown name, a value that does not "
    "parse, one outside the broker's bounds such as group.share.min.record.lock.duration.ms, "
    "a heartbeat interval not below its session timeout, a name both set and deleted, or "
    "too many groups with configs). Nothing is changed."
)
_EXCHANGE_PARAMETER: Schema = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": _TOPIC_NAME,
    "description": "Exchange name (an exchange is a topic that routes).",
    "example": "events",
}
_IF_UNUSED_PARAMETER: Schema = {
    "name": "if_unused",
    "in": "query",
    "required": False,
    "schema": {"type": "boolean", "default": False},
    "description": "true: refuse (409 EXCHANGE_IN_USE) while bindings leave the exchange.",
}
_UNKNOWN_EXCHANGE = _error("No such exchange (UNKNOWN_TOPIC_OR_PARTITION).")
_BAD_BINDING = _error(
    "The body is not JSON (MALFORMED_JSON) or has the wrong shape (INVALID_REQUEST), or the "
    "router refuses the binding (INVALID_CONFIG: a bad key, arguments or expression, with "
    "the position of the problem in the message, or a binding that would close a cycle of "
    "exchanges; POLICY_VIOLATION: a limit)."
)
_BAD_BODY = _error(
    "The body is not JSON (MALFORMED_JSON), has the wrong shape (INVALID_REQUEST), or the "
    "broker refuses a value (a Kafka error code such as INVALID_CONFIG)."
)
_TOO_LARGE = _error("The body is larger than 1 MiB (PAYLOAD_TOO_LARGE).")
# Who may ask (weirmq.admin.http, "Security" in docs/admin-api.md): added to every
# operation by `_guarded`, since the check runs before any of them.
_WRONG_HOST = _error(
    "The Host header is not a name of this API (HOST_NOT_ALLOWED): neither the address the "
    "request arrived on, nor localhost on loopback, nor a name in admin_allowed_hosts."
)
_FOREIGN_ORIGIN = _error(
    "The Origin header is another site's (ORIGIN_NOT_ALLOWED): changes are taken from "
    "clients that send no Origin, or from the API's own origin."
)
_NOT_JSON = _error(
    "A body is sent with a Content-Type other than application/json, or none "
    "(UNSUPPORTED_MEDIA_TYPE)."
)
_STATE_CHANGING = ("post", "put", "patch", "delete")
_UNAUTHORIZED = {
    **_error(
        "The request needs the admin token and has none, or a wrong one (UNAUTHORIZED): "
        "every DELETE, offsets resets but dry runs, trims and redrives, and every request "
        "but the health check when admin_listen is beyond loopback."
    ),
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
}
_PUBLIC_PATHS = frozenset({"/api/v1/health"})


def _guarded(paths: dict[str, Schema]) -> dict[str, Schema]:
    """`paths` with the refusals of the request guard on each operation: a wrong Host on
    every one; a foreign Origin and a body that is not JSON on those that change things."""
    for path, item in paths.items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            responses = operation["responses"]
            responses["421"] = _WRONG_HOST
            if path not in _PUBLIC_PATHS:
                responses["401"] = _UNAUTHORIZED
                operation.setdefault("security", [{}, {"bearer": []}])
            if method == "delete":
                operation["security"] = [{"bearer": []}]
            if method in _STATE_CHANGING:
                responses["403"] = _FOREIGN_ORIGIN
                responses["415"] = _NOT_JSON
            operation["responses"] = dict(sorted(responses.items()))
    return paths


def _paths() -> dict[str, Schema]:
    return {
        "/api/v1/health": {
            "get": {
                "operationId": "getHealth",
                "tags": ["broker"],
                "summary": "Whether the broker serves every partition.",
                "responses": {
                    "200": _json(_ref("Health"), "Healthy."),
                    "503": _json(_ref("Health"), "Some partition is offline, or stopping."),
                },
            }
        },
        "/api/v1/broker": {
            "get": {
                "operationId": "getBroker",
                "tags": ["broker"],
                "summary": "The broker: identity, address, connections, settings.",
                "responses": {"200": _json(_ref("Broker"), "The broker.")},
            }
        },
        "/api/v1/topics": {
            "get": {
                "operationId": "listTopics",
                "tags": ["topics"],
                "summary": "Every topic, with its size.",
                "responses": {"200": _json(_ref("TopicList"), "The topics, by name.")},
            },
            "post": {
                "operationId": "createTopic",
                "tags": ["topics"],
                "summary": "Create a topic.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("CreateTopic")}},
                },
                "responses": {
                    "201": {
                        **_json(_ref("Topic"), "Created."),
                        "headers": {
                            "Location": {
                                "description": "The new topic's URL.",
                                "schema": {"type": "string"},
                            }
                        },
                    },
                    "400": _BAD_BODY,
                    "409": _error("The topic exists (TOPIC_ALREADY_EXISTS)."),
                    "413": _TOO_LARGE,
                },
            },
        },
        "/api/v1/topics/{name}": {
            "parameters": [_NAME_PARAMETER],
            "get": {
                "operationId": "getTopic",
                "tags": ["topics"],
                "summary": "A topic and the state of each of its partitions.",
                "responses": {"200": _json(_ref("Topic"), "The topic."), "404": _UNKNOWN_TOPIC},
            },
            "delete": {
                "operationId": "deleteTopic",
                "tags": ["topics"],
                "summary": "Delete a topic and its data.",
                "responses": {"204": {"description": "Deleted."}, "404": _UNKNOWN_TOPIC},
            },
        },
        "/api/v1/topics/{name}/partitions": {
            "parameters": [_NAME_PARAMETER],
            "get": {
                "operationId": "listPartitions",
                "tags": ["topics"],
                "summary": "The state of each partition of a topic.",
                "responses": {
                    "200": _json(_ref("PartitionList"), "The partitions, by index."),
                    "404": _UNKNOWN_TOPIC,
                },
            },
        },
        "/api/v1/topics/{name}/partitions/{partition}": {
            "parameters": [_NAME_PARAMETER, _PARTITION_PARAMETER],
            "get": {
                "operationId": "getPartition",
                "tags": ["topics"],
                "summary": "The state of one partition.",
                "responses": {
                    "200": _json(_ref("Partition"), "The partition."),
                    "400": _error("The partition is not a number (INVALID_REQUEST)."),
                    "404": _error("No such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)."),
                },
            },
        },
        "/api/v1/topics/{name}/configs": {
            "parameters": [_NAME_PARAMETER],
            "get": {
                "operationId": "describeTopicConfigs",
                "tags": ["topics"],
                "summary": "Every config of a topic, with its value and where it comes from.",
                "responses": {
                    "200": _json(_ref("TopicConfigs"), "The configs, by name."),
                    "404": _UNKNOWN_TOPIC,
                },
            },
            "patch": {
                "operationId": "alterTopicConfigs",
                "tags": ["topics"],
                "summary": "Set and remove config overrides of a topic, all or nothing.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("AlterConfigs")}},
                },
                "responses": {
                    "200": _json(_ref("TopicConfigs"), "The configs after the change."),
                    "400": _BAD_BODY,
                    "404": _UNKNOWN_TOPIC,
                    "413": _TOO_LARGE,
                },
            },
        },
        "/api/v1/groups": {
            "get": {
                "operationId": "listGroups",
                "tags": ["groups"],
                "summary": "Every consumer group, with its state, size and total lag.",
                "responses": {"200": _json(_ref("GroupList"), "The groups, by id.")},
            },
        },
        "/api/v1/groups/{group}": {
            "parameters": [_GROUP_PARAMETER],
            "get": {
                "operationId": "getGroup",
                "tags": ["groups"],
                "summary": "A group, its members and their partitions, and its offsets and "
                "lag per partition.",
                "responses": {"200": _json(_ref("Group"), "The group."), "404": _UNKNOWN_GROUP},
            },
            "delete": {
                "operationId": "deleteGroup",
                "tags": ["groups"],
                "summary": "Delete a group that has no members, and its committed offsets.",
                "responses": {
                    "204": {"description": "Deleted."},
                    "404": _UNKNOWN_GROUP,
                    "409": _error("The group has members (NON_EMPTY_GROUP)."),
                },
            },
        },
        "/api/v1/groups/{group}/configs": {
            "parameters": [_GROUP_PARAMETER],
            "get": {
                "operationId": "describeGroupConfigs",
                "tags": ["groups"],
                "summary": "Every config of a group, with its value and where it comes from "
                "(a group need not exist to have configs).",
                "responses": {"200": _json(_ref("GroupConfigs"), "The configs, by name.")},
            },
            "patch": {
                "operationId": "alterGroupConfigs",
                "tags": ["groups"],
                "summary": "Set and remove config overrides of a group, all or nothing.",
                "requestBody": {
                    "required": True,
                    "description": "Group configs (Kafka's consumer.*, share.* and streams.* "
                    "names) to set and to remove; a name may not be both.",
                    "content": {
                        "application/json": {
                            "schema": _ref("AlterConfigs"),
                            # The topic example's names are no group's: the fuzz test's
                            # first case would never go past the refusal.
                            "example": _GROUP_CONFIGS_EXAMPLE,
                        }
                    },
                },
                "responses": {
                    "200": _json(_ref("GroupConfigs"), "The configs after the change."),
                    "400": _BAD_GROUP_CONFIGS,
                    "413": _TOO_LARGE,
                    "503": _error("The configs could not be written (KAFKA_STORAGE_ERROR)."),
                },
            },
        },
        "/api/v1/exchanges": {
            "get": {
                "operationId": "listExchanges",
                "tags": ["exchanges"],
                "summary": "Every exchange, with its definition and number of bindings.",
                "responses": {"200": _json(_ref("ExchangeList"), "The exchanges, by name.")},
            },
            "post": {
                "operationId": "declareExchange",
                "tags": ["exchanges"],
                "summary": "Declare an exchange: create it, or find it as declared.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("DeclareExchange")}},
                },
                "responses": {
                    "200": _json(_ref("Exchange"), "It exists, with this definition."),
                    "201": {
                        **_json(_ref("Exchange"), "Created."),
                        "headers": {
                            "Location": {
                                "description": "The new exchange's URL.",
                                "schema": {"type": "string"},
                            }
                        },
                    },
                    "400": _BAD_BODY,
                    "409": _error(
                        "It exists with another definition (EXCHANGE_CONFLICT, naming the "
                        "field), or a plain topic has the name (TOPIC_ALREADY_EXISTS)."
                    ),
                    "413": _TOO_LARGE,
                },
            },
        },
        "/api/v1/exchanges/{name}": {
            "parameters": [_EXCHANGE_PARAMETER],
            "get": {
                "operationId": "getExchange",
                "tags": ["exchanges"],
                "summary": "An exchange, its bindings, its counters and its routing lag.",
                "responses": {
                    "200": _json(_ref("Exchange"), "The exchange."),
                    "404": _UNKNOWN_EXCHANGE,
                },
            },
            "delete": {
                "operationId": "deleteExchange",
                "tags": ["exchanges"],
                "summary": "Delete an exchange, its log, and every binding from or to it.",
                "parameters": [_IF_UNUSED_PARAMETER],
                "responses": {
                    "204": {"description": "Deleted."},
                    "400": _error("if_unused is not true or false (INVALID_REQUEST)."),
                    "404": _UNKNOWN_EXCHANGE,
                    "409": _error(
                        "if_unused is true and bindings leave the exchange (EXCHANGE_IN_USE)."
                    ),
                },
            },
        },
        "/api/v1/exchanges/{name}/bindings": {
            "parameters": [_EXCHANGE_PARAMETER],
            "get": {
                "operationId": "listBindings",
                "tags": ["exchanges"],
                "summary": "The bindings leaving an exchange, in the order they were made.",
                "responses": {
                    "200": _json(_ref("BindingList"), "The bindings."),
                    "404": _UNKNOWN_EXCHANGE,
                },
            },
            "post": {
                "operationId": "bind",
                "tags": ["exchanges"],
                "summary": "Bind a topic or an exchange to this exchange.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("BindingRequest")}},
                },
                "responses": {
                    "200": _json(_ref("Binding"), "The binding existed already."),
                    "201": _json(_ref("Binding"), "Bound (durable before the answer)."),
                    "400": _BAD_BINDING,
                    "404": _error(
                        "No such exchange, or no topic or exchange to bind to "
                        "(UNKNOWN_TOPIC_OR_PARTITION)."
                    ),
                    "413": _TOO_LARGE,
                },
            },
        },
        "/api/v1/exchanges/{name}/bindings/delete": {
            "parameters": [_EXCHANGE_PARAMETER],
            "post": {
                "operationId": "unbind",
                "tags": ["exchanges"],
                "summary": "Remove the binding with these fields (those it was made with).",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("BindingRequest")}},
                },
                "responses": {
                    "204": {"description": "Removed (durable before the answer)."},
                    "400": _BAD_BINDING,
                    "404": _error(
                        "No such exchange (UNKNOWN_TOPIC_OR_PARTITION), or no such binding "
                        "(BINDING_NOT_FOUND)."
                    ),
                    "413": _TOO_LARGE,
                },
            },
        },
        "/api/v1/exchanges/{name}/replay": {
            "parameters": [_EXCHANGE_PARAMETER],
            "post": {
                "operationId": "replayExchange",
                "tags": ["exchanges"],
                "summary": "Re-route a range of the exchange's log into one of its bindings "
                "(by default, what the exchange held before the binding was made).",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ReplayRequest")}},
                },
                "responses": {
                    "200": _json(_ref("ReplayResult"), "Done: the copies are written."),
                    "400": _BAD_BINDING,
                    "404": _error(
                        "No such exchange (UNKNOWN_TOPIC_OR_PARTITION), or no such binding "
                        "(BINDING_NOT_FOUND)."
                    ),
                    "413": _TOO_LARGE,
                },
            },
        },
        **_console_paths(),
        "/openapi.json": {
            "get": {
                "operationId": "getOpenApi",
                "tags": ["meta"],
                "summary": "This document.",
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.0 document.")},
            }
        },
        "/metrics": {
            "get": {
                "operationId": "getMetrics",
                "tags": ["meta"],
                "summary": "Prometheus metrics (docs/admin-api.md lists them).",
                "responses": {
                    "200": {
                        "description": "Prometheus text format, or OpenMetrics when the "
                        "Accept header asks for application/openmetrics-text.",
                        "content": {
                            "text/plain": {"schema": {"type": "string"}},
                            "application/openmetrics-text": {"schema": {"type": "string"}},
                        },
                    }
                },
            }
        },
    }


_FLOW_REFUSED_429 = _error(
    "The broker holds publishes back now (THROTTLED; flow control: a resource at its "
    "limit); Retry-After says when to try again."
)
_FLOW_REFUSED_503 = _error(
    "The broker cannot store records now (THROTTLED: the disk is full or failing, or "
    "KAFKA_STORAGE_ERROR)."
)
_MESSAGES_QUERY: list[Schema] = [
    {
        "name": "partition",
        "in": "query",
        "required": False,
        "schema": {**_integer(0, INT32_MAX, "int32"), "default": 0},
    },
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "schema": _integer(),
        "description": "The first offset shown (default: the newest `limit` records).",
    },
    {
        "name": "timestamp",
        "in": "query",
        "required": False,
        "schema": _integer(),
        "description": "Start at the first record at or after this time (epoch ms).",
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {
            **_integer(1, operations.BROWSE_LIMIT_MAX, "int32"),
            "default": operations.BROWSE_LIMIT_DEFAULT,
        },
    },
]


def _body(name: str) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _console_paths() -> dict[str, Schema]:
    return {
        "/api/v1/overview": {
            "get": {
                "operationId": "getOverview",
                "tags": ["broker"],
                "summary": "Status, counts, connections and the last minutes of traffic.",
                "responses": {"200": _json(_ref("Overview"), "The overview.")},
            }
        },
        "/api/v1/connections": {
            "get": {
                "operationId": "getConnections",
                "tags": ["broker"],
                "summary": "Open connections per protocol.",
                "responses": {"200": _json(_ref("ConnectionList"), "The counts.")},
            }
        },
        "/api/v1/queues": {
            "get": {
                "operationId": "listQueues",
                "tags": ["groups"],
                "summary": "Every share-partition of every share group: what waits, what is "
                "in flight, and where dead letters go.",
                "responses": {"200": _json(_ref("QueueList"), "The queues.")},
            }
        },
        "/api/v1/topics/{name}/messages": {
            "parameters": [_NAME_PARAMETER],
            "get": {
                "operationId": "browseMessages",
                "tags": ["messages"],
                "summary": "Records of one partition, from an offset or a time.",
                "parameters": _MESSAGES_QUERY,
                "responses": {
                    "200": _json(_ref("MessagePage"), "The records, oldest first."),
                    "400": _error("A parameter is not a number in range (INVALID_REQUEST)."),
                    "404": _error("No such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)."),
                    "503": _error("The partition is offline (KAFKA_STORAGE_ERROR)."),
                },
            },
            "post": {
                "operationId": "produceMessage",
                "tags": ["messages"],
                "summary": "Append one record as a Kafka producer with acks=all would.",
                "requestBody": _body("ProduceRequest"),
                "responses": {
                    "201": _json(_ref("ProduceResult"), "Written and fsynced."),
                    "400": _BAD_BODY,
                    "404": _error("No such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)."),
                    "413": _TOO_LARGE,
                    "429": {
                        **_FLOW_REFUSED_429,
                        "headers": {"Retry-After": {"schema": {"type": "string"}}},
                    },
                    "503": _FLOW_REFUSED_503,
                },
            },
        },
        "/api/v1/topics/{name}/trim": {
            "parameters": [_NAME_PARAMETER],
            "post": {
                "operationId": "trimTopic",
                "tags": ["messages"],
                "summary": "Delete the records before an offset (DeleteRecords).",
                "security": [{"bearer": []}],
                "requestBody": _body("TrimRequest"),
                "responses": {
                    "200": _json(_ref("TrimResult"), "The new log start offsets."),
                    "400": _error(
                        "A bad body (MALFORMED_JSON, INVALID_REQUEST), an offset past the "
                        "log end (OFFSET_OUT_OF_RANGE), or an internal topic "
                        "(INVALID_TOPIC_EXCEPTION)."
                    ),
                    "404": _error("No such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)."),
                    "413": _TOO_LARGE,
                    "503": _FLOW_REFUSED_503,
                },
            },
        },
        "/api/v1/topics/{name}/redrive": {
            "parameters": [_NAME_PARAMETER],
            "post": {
                "operationId": "redriveTopic",
                "tags": ["messages"],
                "summary": "Move the records of a (dead-letter) topic to another topic.",
                "security": [{"bearer": []}],
                "requestBody": _body("RedriveRequest"),
                "responses": {
                    "200": _json(_ref("RedriveResult"), "Copied (fsynced), then deleted."),
                    "400": _BAD_BODY,
                    "404": _error("No such topic (UNKNOWN_TOPIC_OR_PARTITION)."),
                    "413": _TOO_LARGE,
                    "429": {
                        **_FLOW_REFUSED_429,
                        "headers": {"Retry-After": {"schema": {"type": "string"}}},
                    },
                    "503": _FLOW_REFUSED_503,
                },
            },
        },
        "/api/v1/groups/{group}/offsets": {
            "parameters": [_GROUP_PARAMETER],
            "post": {
                "operationId": "resetGroupOffsets",
                "tags": ["groups"],
                "summary": "Reset a group's committed offsets (the group must have no "
                "members), or show what a reset would do (dry_run).",
                "requestBody": _body("OffsetsResetRequest"),
                "responses": {
                    "200": _json(_ref("OffsetsResetResult"), "Committed (or not: dry_run)."),
                    "400": _BAD_BODY,
                    "404": _error(
                        "No such group and no topic given (GROUP_ID_NOT_FOUND), or no such "
                        "topic or partition (UNKNOWN_TOPIC_OR_PARTITION)."
                    ),
                    "409": _error("The group has members (NON_EMPTY_GROUP)."),
                    "413": _TOO_LARGE,
                    "503": _error("The offsets could not be written (KAFKA_STORAGE_ERROR)."),
                },
            },
        },
    }


def _schemas() -> dict[str, Schema]:
    return {
        "Error": _ERROR,
        "Health": _HEALTH,
        "Broker": _broker(),
        "Settings": _settings(),
        "TopicSummary": _object(_TOPIC_SUMMARY_PROPERTIES),
        "TopicList": _object({"topics": {"type": "array", "items": _ref("TopicSummary")}}),
        "Topic": _object(
            {
                **_TOPIC_SUMMARY_PROPERTIES,
                "partitions": {"type": "array", "items": _ref("Partition")},
            }
        ),
        "Partition": _PARTITION,
        "PartitionList": _object(
            {"topic": _STRING, "partitions": {"type": "array", "items": _ref("Partition")}}
        ),
        "ConfigEntry": _CONFIG_ENTRY,
        "TopicConfigs": _object(
            {"topic": _STRING, "configs": {"type": "array", "items": _ref("ConfigEntry")}}
        ),
        "GroupConfigs": _object(
            {"group": _STRING, "configs": {"type": "array", "items": _ref("ConfigEntry")}}
        ),
        "GroupSummary": _object(_GROUP_SUMMARY_PROPERTIES),
        "GroupList": _object({"groups": {"type": "array", "items": _ref("GroupSummary")}}),
        "Group": _object(
            {
                **_GROUP_SUMMARY_PROPERTIES,
                "members": {"type": "array", "items": _ref("GroupMember")},
                "partitions": {"type": "array", "items": _ref("GroupPartition")},
                "share_partitions": {"type": "array", "items": _ref("SharePartition")},
            }
        ),
        "GroupMember": _GROUP_MEMBER,
        "GroupPartition": _GROUP_PARTITION,
        "SharePartition": _SHARE_PARTITION,
        "ExchangeSummary": _object(_EXCHANGE_SUMMARY_PROPERTIES),
        "ExchangeList": _object({"exchanges": {"type": "array", "items": _ref("ExchangeSummary")}}),
        "Exchange": _object(
            {
                **_EXCHANGE_SUMMARY_PROPERTIES,
                "bindings": {"type": "array", "items": _ref("Binding")},
                "stats": _EXCHANGE_STATS,
                "routing_lag_records": {
                    **_integer(),
                    "description": "Records written to the exchange and not routed yet, "
                    "summed over its partitions: 0 but while the broker re-routes after a "
                    "crash.",
                },
            }
        ),
        "Binding": _BINDING,
        "BindingList": _object(
            {"exchange": _STRING, "bindings": {"type": "array", "items": _ref("Binding")}}
        ),
        "CreateTopic": _CREATE_TOPIC,
        "AlterConfigs": _ALTER_CONFIGS,
        "DeclareExchange": _DECLARE_EXCHANGE,
        "BindingRequest": _BINDING_REQUEST,
        "ReplayRequest": _REPLAY_REQUEST,
        "ReplayResult": _REPLAY_RESULT,
        "Connections": _CONNECTIONS,
        "ConnectionList": _object({"connections": _ref("Connections")}),
        "HistorySample": _HISTORY_SAMPLE,
        "Overview": _OVERVIEW,
        "Queue": _QUEUE,
        "QueueList": _object({"queues": {"type": "array", "items": _ref("Queue")}}),
        "Message": _MESSAGE,
        "MessagePage": _MESSAGE_PAGE,
        "ProduceRequest": _PRODUCE_REQUEST,
        "ProduceResult": _PRODUCE_RESULT,
        "OffsetsResetRequest": _RESET_REQUEST,
        "OffsetsResetResult": _RESET_RESULT,
        "TrimRequest": _TRIM_REQUEST,
        "TrimResult": _TRIM_RESULT,
        "RedriveRequest": _REDRIVE_REQUEST,
        "RedriveResult": _REDRIVE_RESULT,
    }


def document() -> Schema:
    """The whole OpenAPI document, a fresh copy each time (tools such as schemathesis write
    into the document they are given; the module's constants must not change)."""
    return copy.deepcopy(
        {
            "openapi": OPENAPI_VERSION,
            "info": {
                "title": "WeirMQ admin API",
                "version": __version__,
                "description": "Health, topics, partitions, consumer groups (with their "
                "lag) and exchanges (with their bindings) of one WeirMQ broker. Errors are "
                '{"error": {"code": ..., "message": ...}} with a 4xx status. Destructive '
                "requests need Authorization: Bearer <admin token>, and off loopback every "
                "request but the health check does. Requests must name the API's own host "
                "(Host); changes must come from no web page but the API's own (Origin) and "
                "carry JSON "
                "(Content-Type: application/json).",
            },
            "paths": _guarded(_paths()),
            "components": {
                "schemas": _schemas(),
                "securitySchemes": {
                    "bearer": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "The admin token: the admin_token setting, or the "
                        "file admin-token in the data directory (docs/admin-api.md).",
                    }
                },
            },
        }
    )
