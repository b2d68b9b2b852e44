"""The console's endpoints of a real ``weirmq serve`` process, with real Kafka clients:
records confluent-kafka produced (compressed, keyed, with headers) are browsed over HTTP,
a message produced over HTTP is read by a consumer, and a group's offsets reset over HTTP
are where its next consumer resumes. Changes without the token are refused (401).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, Producer, TopicPartition

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

TIMEOUT_S = 20.0
TOPIC = "console"
RECORDS = 20


def call(
    broker: BrokerProcess,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = None,
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body or None) of one request to the admin API."""
    assert broker.admin_url is not None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.admin_url + path, data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def consumer(broker: BrokerProcess, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )


def poll_one(client: Consumer) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        message = client.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            return message
    raise AssertionError("no record within the timeout")


def test_browse_produce_and_reset_offsets_with_real_clients(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    assert broker.stdout_path is not None
    token_file = broker.data_dir / "admin-token"
    line = re.search(
        r"^weirmq: admin API, metrics and console on (\S+) \(token for changes in (.+)\)$",
        broker.stdout_path.read_text(),
        re.M,
    )
    assert line is not None and line.group(1) == broker.admin_url
    assert line.group(2) == str(token_file)
    token = token_file.read_text().strip()

    status, _headers, _body = call(
        broker, "POST", "/api/v1/topics", {"name": TOPIC, "partitions": 1}
    )
    assert status == 201
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": "gzip", "linger.ms": 20}
    )
    for n in range(RECORDS):
        producer.produce(TOPIC, b"value %d" % n, key=b"key %d" % n, headers=[("n", b"%d" % n)])
    assert producer.flush(TIMEOUT_S) == 0

    # Browse: the newest by default, from an offset, the bytes decoded from gzip batches.
    status, _headers, page = call(broker, "GET", f"/api/v1/topics/{TOPIC}/messages?limit=5")
    assert status == 200 and page["log_end_offset"] == RECORDS
    assert [m["offset"] for m in page["messages"]] == list(range(RECORDS - 5, RECORDS))
    status, _headers, page = call(
        broker, "GET", f"/api/v1/topics/{TOPIC}/messages?offset=3&limit=2"
    )
    first = page["messages"][0]
    assert (first["offset"], first["key"]["text"], first["value"]["text"]) == (
        3,
        "key 3",
        "value 3",
    )
    assert first["headers"] == [{"key": "n", "value": {"base64": "Mw==", "text": "3"}}]

    # Produce over HTTP; a Kafka consumer reads it where the answer says it is.
    status, _headers, made = call(
        broker, "POST", f"/api/v1/topics/{TOPIC}/messages", {"value": "from the console"}
    )
    assert status == 201 and made["offset"] == RECORDS and made["partition"] == 0
    reader = consumer(broker, "reader")
    reader.assign([TopicPartition(TOPIC, 0, RECORDS)])
    message = poll_one(reader)
    assert (message.offset(), message.value()) == (RECORDS, b"from the console")
    reader.close()

    # A group reads everything and commits; while it is active a reset is refused.
    group = consumer(broker, "resetters")
    group.subscribe([TOPIC])
    for _ in range(RECORDS + 1):
        last = poll_one(group)
    group.commit(message=last, asynchronous=False)
    body = {"to": "offset", "value": 5}
    status, _headers, refusal = call(
        broker, "POST", "/api/v1/groups/resetters/offsets", body, token
    )
    assert status == 409 and refusal["error"]["code"] == "NON_EMPTY_GROUP"
    status, _headers, overview = call(broker, "GET", "/api/v1/overview")
    assert status == 200 and overview["connections"]["kafka"] >= 1
    assert overview["status"] == "ok" and overview["groups"] >= 1
    group.close()

    # Inactive: without the token only a dry run is answered; with it the reset commits.
    status, headers, refusal = call(broker, "POST", "/api/v1/groups/resetters/offsets", body)
    assert status == 401 and refusal["error"]["code"] == "UNAUTHORIZED"
    assert headers["WWW-Authenticate"].startswith("Bearer")
    dry = {**body, "dry_run": True}
    status, _headers, preview = call(broker, "POST", "/api/v1/groups/resetters/offsets", dry)
    assert status == 200
    assert preview["partitions"] == [
        {"topic": TOPIC, "partition": 0, "current": RECORDS + 1, "new": 5}
    ]
    status, _headers, done = call(broker, "POST", "/api/v1/groups/resetters/offsets", body, token)
    assert status == 200 and done["partitions"][0]["new"] == 5

    resumed = consumer(broker, "resetters")
    resumed.subscribe([TOPIC])
    message = poll_one(resumed)
    assert message.offset() == 5 and message.value() == b"value 5"
    resumed.close()

    # Destructive requests without the token change nothing.
    status, _headers, refusal = call(broker, "DELETE", f"/api/v1/topics/{TOPIC}")
    assert status == 401 and "admin-token" in refusal["error"]["message"]
    status, _headers, _body = call(
        broker, "POST", f"/api/v1/topics/{TOPIC}/trim", {"before_offset": 5}
    )
    assert status == 401
    status, _headers, page = call(
        broker, "GET", f"/api/v1/topics/{TOPIC}/messages?offset=0&limit=1"
    )
    assert page["log_start_offset"] == 0 and page["messages"][0]["offset"] == 0
    status, _headers, trimmed = call(
        broker, "POST", f"/api/v1/topics/{TOPIC}/trim", {"before_offset": 5}, token
    )
    assert status == 200 and trimmed["partitions"] == [{"partition": 0, "log_start_offset": 5}]
    assert broker.stop() == 0


def test_the_token_survives_a_restart_and_the_setting_replaces_it(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    token_file = broker.data_dir / "admin-token"
    token = token_file.read_text().strip()
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert broker.stop() == 0
    broker.start()
    assert token_file.read_text().strip() == token  # a bookmarked console keeps working
    status, _headers, _body = call(broker, "DELETE", "/api/v1/groups/none", token=token)
    assert status == 404  # past the token check: the group is simply unknown
    assert broker.stop() == 0

    given = "a-long-enough-secret-token"
    configured = broker_factory(admin_listen="127.0.0.1:0", admin_token=given)
    assert configured.stdout_path is not None
    assert "(token for changes from the admin_token setting)" in configured.stdout_path.read_text()
    status, _headers, _body = call(configured, "DELETE", "/api/v1/groups/none", token=given)
    assert status == 404
    status, _headers, settings = call(configured, "GET", "/api/v1/broker")
    assert settings["settings"]["admin_token"] == "(set)" and given not in json.dumps(settings)
    assert configured.stop() == 0
