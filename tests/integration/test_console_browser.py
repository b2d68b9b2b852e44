"""The web console in a real browser (Debian's chromium, driven by Playwright) against a
real broker with real Kafka clients: pages load without errors, the message browser shows
what confluent-kafka produced, an offset reset made through the page moves where the group
consumes, charts follow the broker live, shortcuts navigate, and a destructive action asks
for the admin token.

One broker and one browser serve the whole module (starting either costs more than most
tests here); every test opens its own browser context, so no page state leaks between
tests. Each test saves a full-page screenshot of what it saw into ``$WEIRMQ_TEST_ARTIFACTS``
(or its tmp_path); with ``$WEIRMQ_CONSOLE_SCREENSHOTS`` set, the overview, topic and group
pages are also saved there at 1280x800 for the documentation.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from weirmq.testing import Broker

pytestmark = pytest.mark.integration

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium")
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 10_000
CLIENT_TIMEOUT_S = 20.0
TOPIC = "orders"
GROUP = "billing"
JSON_VALUE = b'{"id": 1, "item": "widget", "tags": ["a", "b"]}'
BINARY_VALUE = bytes([0x00, 0x01, 0xFE, 0xFF, 0x7F])
TEXT_RECORDS = 5
QUEUE_GROUP, QUEUE_TOPIC, DEAD_LETTERS = "work", "jobs", "jobs.dlq"


# --- the broker and its data ----------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(admin=True, default_partitions=2, group_initial_rebalance_delay_ms=0) as running:
        _produce_fixture_data(running.bootstrap_servers)
        _commit_group(running.bootstrap_servers)
        _admin(running, "POST", "/api/v1/exchanges", {"name": "events", "type": "topic"})
        yield running


def _produce_fixture_data(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(TEXT_RECORDS):
        producer.produce(TOPIC, value=b"hello %d" % i, key=b"k%d" % i, partition=0)
    producer.produce(TOPIC, value=JSON_VALUE, key=b"json", partition=0, headers=[("trace", b"abc")])
    producer.produce(TOPIC, value=BINARY_VALUE, partition=0)
    producer.produce(TOPIC, value=b"other", partition=1)
    producer.produce("scratch", value=b"to be deleted", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def _commit_group(bootstrap: str) -> None:
    """`GROUP` reads all of `TOPIC`, commits, and leaves (so its offsets can be reset)."""
    consumer = _consumer(bootstrap, "earliest")
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        read = 0
        while read < TEXT_RECORDS + 3:
            assert time.monotonic() < deadline, f"read {read} records"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _consumer(bootstrap: str, reset: str = "latest") -> Consumer:
    """A member of `GROUP`; after the fixture commits, where it starts is the group's
    committed offset, which `reset` never overrides."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
            "log_level": 0,
        }
    )


def _admin(broker: Broker, method: str, path: str, body: object = None) -> Any:
    """A request to the admin API as curl would send it (with the token)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.admin_url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    token = _token(broker)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT_S) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _token(broker: Broker) -> str | None:
    token = getattr(broker, "admin_token", None)
    if token is not None:
        return str(token)
    path = broker.data_dir / "admin-token"
    return path.read_text().strip() if path.exists() else None


@pytest.fixture(scope="module")
def dead_letter(broker: Broker) -> None:
    """Share group `QUEUE_GROUP` of `QUEUE_TOPIC` rejected one record of two, which went to
    its dead-letter topic; the other is accepted."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    configs = {
        "errors.deadletterqueue.topic.name": DEAD_LETTERS,
        "errors.deadletterqueue.copy.record.enable": "true",
        "share.auto.offset.reset": "earliest",  # the records are produced before it joins
    }
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ConfigResource.Type.GROUP, QUEUE_GROUP, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": QUEUE_GROUP,
            "share.acknowledgement.mode": "explicit",
            "log_level": 0,
        }
    )
    try:
        consumer.subscribe([QUEUE_TOPIC])
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
        producer.produce(QUEUE_TOPIC, value=b"keep", partition=0)
        producer.produce(QUEUE_TOPIC, value=b"reject", partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        settled = 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while settled < 2:
            assert time.monotonic() < deadline, f"settled {settled} of 2 records"
            for message in consumer.poll(0.5):
                if message.error() is None:
                    kind = AcknowledgeType.REJECT if message.value() == b"reject" else None
                    consumer.acknowledge(message, kind or AcknowledgeType.ACCEPT)
                    settled += 1
            consumer.commit_sync(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()


# --- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian package chromium)")
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Console:
    """One browser context on the console, and every error the page reported."""

    def __init__(self, page: Any, url: str, artifacts: Path) -> None:
        self.page = page
        self.url = url
        self.artifacts = artifacts
        self.errors: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.set_default_timeout(WAIT_MS)

    def _on_console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def open(self, fragment: str) -> None:
        self.page.goto(f"{self.url}/#{fragment}")

    def alerts(self) -> list[str]:
        return [str(text) for text in self.page.locator(".alert:not(.info)").all_inner_texts()]

    def snapshot(self, name: str, docs_name: str | None = None) -> None:
        self.page.screenshot(path=str(self.artifacts / f"{name}.png"), full_page=True)
        docs = os.environ.get("WEIRMQ_CONSOLE_SCREENSHOTS")
        if docs_name is not None and docs:
            Path(docs).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(docs) / docs_name))

    def assert_clean(self, asked_for_the_token: bool = False) -> None:
        """No error alert, and no error in the browser's console; where the API asked
        for the token, the browser logs that answer as a failed resource."""
        assert self.alerts() == [], "the page shows errors"
        errors = self.errors
        if asked_for_the_token:
            errors = [e for e in errors if "status of 401" not in e]
        assert errors == [], "the browser reported errors"


@pytest.fixture
def console(
    broker: Broker, browser: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Console]:
    artifacts = Path(os.environ.get("WEIRMQ_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        opened = Console(context.new_page(), broker.admin_url, artifacts)
        yield opened
        # What the page showed last, pass or fail (a failure's screenshot says the most).
        opened.page.screenshot(path=str(artifacts / f"{request.node.name}-end.png"), full_page=True)
    finally:
        context.close()


def _fill_token_if_asked(console: Console, broker: Broker, wait_ms: int = 1_500) -> bool:
    dialog = console.page.locator("#token-dialog")
    try:
        dialog.wait_for(state="visible", timeout=wait_ms)
    except playwright_api.TimeoutError:
        return False
    token = _token(broker)
    assert token is not None, "the API asked for a token and the broker has none to give"
    console.page.fill("#token-input", token)
    console.page.press("#token-input", "Enter")
    dialog.wait_for(state="hidden")
    return True


# --- the tests ------------------------------------------------------------------------------

PAGES = [
    ("overview", "/overview", "#main .page.overview th:text-is('data_dir')"),
    ("topics", "/topics", f"a[href='#/topics/{TOPIC}']"),
    ("topic", f"/topics/{TOPIC}", ".message-browser tbody tr[data-key='0']"),
    ("groups", "/groups", f"a[href='#/groups/{GROUP}']"),
    ("group", f"/groups/{GROUP}", f"#main .page.group tbody th a[href='#/topics/{TOPIC}']"),
    ("exchanges", "/exchanges", "a[href='#/exchanges/events']"),
    ("exchange", "/exchanges/events", "#main .page.exchange tbody tr"),
    ("queues", "/queues", f"#main .page.queues a[href='#/topics/{DEAD_LETTERS}']"),
    ("connections", "/connections", "#main .page.connections tbody th:text-is('Kafka')"),
]


@pytest.mark.parametrize(("name", "fragment", "ready"), PAGES, ids=[p[0] for p in PAGES])
def test_page_loads_without_errors(
    console: Console, request: pytest.FixtureRequest, name: str, fragment: str, ready: str
) -> None:
    if name == "queues":
        request.getfixturevalue("dead_letter")
    console.open(fragment)
    console.page.locator(ready).first.wait_for()
    console.page.wait_for_selector("#live:not(.failing)")
    console.snapshot(name)
    console.assert_clean()
    assert console.page.locator("nav a[aria-current='page']").count() == 1


def test_message_browser_shows_records_as_text_json_and_hex(console: Console) -> None:
    page = console.page
    console.open(f"/topics/{TOPIC}")
    rows = page.locator(".message-browser tbody tr")
    page.locator(".message-browser tbody tr[data-key='6']").wait_for()
    assert rows.count() == TEXT_RECORDS + 2
    first = page.locator(".message-browser tbody tr[data-key='0']")
    assert "hello 0" in first.inner_text() and "k0" in first.inner_text()
    json_row = page.locator(".message-browser tbody tr[data-key='5']")
    assert "trace" in json_row.inner_text() and "abc" in json_row.inner_text()

    page.locator(".toggle label", has_text="JSON").click()
    pretty = json_row.locator("td:nth-child(4) pre.view-json").inner_text()
    assert json.loads(pretty) == json.loads(JSON_VALUE) and '\n  "id": 1' in pretty

    page.locator(".toggle label", has_text="Hex").click()
    binary = page.locator(".message-browser tbody tr[data-key='6'] td:nth-child(4) pre.view-hex")
    assert "00 01 fe ff 7f" in binary.inner_text()
    console.snapshot("topic-hex")

    page.locator(".toggle label", has_text="Text").click()
    page.select_option(".message-browser select >> nth=1", "offset")
    page.get_by_label("Offset", exact=True).fill("5")
    page.get_by_label("Limit").fill("1")
    page.get_by_label("Limit").press("Enter")  # forms submit with Enter
    page.wait_for_function(
        "() => document.querySelectorAll('.message-browser tbody tr').length === 1"
        " && document.querySelector('.message-browser tbody tr').dataset.key === '5'"
    )

    produce = page.locator("section.produce")
    produce.get_by_label("Value", exact=True).fill('{"made": "by the console"}')
    produce.get_by_label("Key (empty for none)").fill("console-key")
    produce.get_by_label("Headers").fill("origin: console")
    produce.get_by_label("Partition").select_option("1")
    produce.get_by_label("Value", exact=True).press("Control+Enter")
    page.get_by_text("Produced to partition 1 at offset 1.").wait_for()

    page.select_option(".message-browser select >> nth=1", "newest")
    page.get_by_label("Limit").fill("20")
    page.select_option(".message-browser select >> nth=0", "0")
    page.get_by_role("button", name="Show messages").click()
    page.locator(".message-browser tbody tr[data-key='6']").wait_for()
    page.locator(".message-browser").scroll_into_view_if_needed()
    console.snapshot("topic", docs_name="topic.png")
    console.assert_clean()


def test_offset_reset_through_the_page_moves_the_group(console: Console, broker: Broker) -> None:
    page = console.page
    console.open(f"/groups/{GROUP}")
    form = page.locator(".offset-reset form")
    page.locator(f"#main tbody th a[href='#/topics/{TOPIC}']").first.wait_for()
    form.get_by_label("Reset to").select_option("offset")
    form.get_by_label("Offset").fill("2")
    form.get_by_label("Topic").select_option(TOPIC)
    form.get_by_label("Partitions (comma separated)").fill("0")
    form.get_by_label("Partitions (comma separated)").press("Enter")  # the preview
    preview = page.locator(".offset-reset tbody tr")
    preview.first.wait_for()
    page.get_by_text("Dry run:").wait_for()
    assert preview.count() == 1
    cells = preview.first.locator("th, td").all_inner_texts()
    assert cells == [TOPIC, "0", str(TEXT_RECORDS + 2), "2"]
    console.snapshot("group", docs_name="group.png")

    page.get_by_role("button", name="Apply").click()
    asked = _fill_token_if_asked(console, broker)
    page.get_by_text("Applied: 1 partition(s) reset.").wait_for()
    console.assert_clean(asked_for_the_token=asked)

    consumer = _consumer(broker.bootstrap_servers)
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:  # partition 1 may hold what another test produced: not reset here
            assert time.monotonic() < deadline, "the group read nothing of partition 0"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None and message.partition() == 0:
                break
        assert message.offset() == 2
    finally:
        consumer.close()


def test_overview_charts_follow_the_broker_without_reloading(
    console: Console, broker: Broker
) -> None:
    page = console.page
    console.open("/overview")
    chart = page.locator("svg.chart").first
    page.wait_for_function("() => document.querySelector('svg.chart').dataset.samples !== '0'")
    page.evaluate("window.stillTheSamePage = true")
    before = chart.get_attribute("data-samples"), chart.locator("path").first.get_attribute("d")

    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
        while not stop.is_set():
            for _ in range(200):
                producer.produce("load", value=b"x" * 500)
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(CLIENT_TIMEOUT_S)

    producing = threading.Thread(target=load, daemon=True)
    producing.start()
    try:
        page.wait_for_function(
            """([samples, d]) => {
                const chart = document.querySelector('svg.chart');
                return chart.dataset.samples !== samples
                    && chart.querySelector('path').getAttribute('d') !== d;
            }""",
            arg=list(before),
            timeout=20_000,
        )
    finally:
        stop.set()
        producing.join(CLIENT_TIMEOUT_S)
    assert page.evaluate("window.stillTheSamePage") is True
    console.snapshot("overview", docs_name="overview.png")
    console.assert_clean()


def test_keyboard_shortcuts_and_focus(console: Console) -> None:
    page = console.page
    console.open("/topics")
    page.locator(f"a[href='#/topics/{TOPIC}']").wait_for()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.matches('.skip:focus-visible')")

    for keys, fragment, heading in [
        ("go", "#/overview", "Overview"),
        ("gg", "#/groups", "Consumer groups"),
        ("ge", "#/exchanges", "Exchanges"),
        ("gq", "#/queues", "Queues"),
        ("gc", "#/connections", "Connections"),
        ("gt", "#/topics", "Topics"),
    ]:
        page.keyboard.press(keys[0])
        page.keyboard.press(keys[1])
        page.wait_for_function("f => location.hash === f", arg=fragment)
        # The page renders after the hash moves (it fetches its data first): wait for
        # its heading, or the previous page's may still be read.
        page.wait_for_function("h => document.querySelector('h1')?.innerText === h", arg=heading)
        assert page.locator("h1").inner_text() == heading

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.classList.contains('page-filter')")
    page.keyboard.type("no-such-topic")
    page.get_by_text("No topic matches the filter.").wait_for()
    page.keyboard.press("Escape")
    page.locator(f"a[href='#/topics/{TOPIC}']").wait_for()

    page.keyboard.press("?")
    page.locator("#help").wait_for(state="visible")
    console.snapshot("shortcuts")
    page.keyboard.press("Escape")
    page.locator("#help").wait_for(state="hidden")


def test_a_destructive_action_without_the_token_asks_for_it(
    console: Console, broker: Broker
) -> None:
    page = console.page
    console.open("/topics/scratch")
    page.locator(".message-browser tbody tr").first.wait_for()
    delete = page.get_by_role("button", name="Delete topic")
    delete.click()
    page.get_by_role("button", name="Really delete topic? Press again").click()
    dialog = page.locator("#token-dialog")
    dialog.wait_for(state="visible")
    assert "admin-token" in dialog.inner_text() and "admin_token" in dialog.inner_text()
    console.snapshot("token-prompt")
    page.get_by_role("button", name="Cancel").click()
    page.locator(".alert", has_text="TOKEN_REQUIRED").wait_for()
    assert "scratch" in [t["name"] for t in _admin(broker, "GET", "/api/v1/topics")["topics"]]

    page.get_by_role("button", name="Delete topic").click()
    page.get_by_role("button", name="Really delete topic? Press again").click()
    assert _fill_token_if_asked(console, broker, wait_ms=WAIT_MS)
    page.wait_for_function("() => location.hash === '#/topics'")
    page.get_by_text("Topic scratch deleted.").wait_for()
    assert "scratch" not in [t["name"] for t in _admin(broker, "GET", "/api/v1/topics")["topics"]]
    console.assert_clean(asked_for_the_token=True)


@pytest.mark.usefixtures("dead_letter")
def test_redrive_moves_dead_letters_back_through_the_queues_page(
    console: Console, broker: Broker
) -> None:
    page = console.page
    console.open("/queues")
    row = page.locator("#main .page.queues tbody tr", has_text=DEAD_LETTERS)
    row.first.get_by_role("button", name="Redrive…").click()
    form = page.locator("form[aria-label='Redrive a dead-letter topic']")
    assert form.get_by_label("Dead-letter topic").input_value() == DEAD_LETTERS
    assert form.get_by_label("Back to topic").input_value() == QUEUE_TOPIC
    form.get_by_label("Back to topic").press("Enter")  # the dry run
    asked = _fill_token_if_asked(console, broker)  # a redrive asks for it, dry run or not
    page.get_by_text(
        f"Dry run: would move 1 record(s) from {DEAD_LETTERS} to {QUEUE_TOPIC}"
    ).wait_for()
    before = _admin(broker, "GET", f"/api/v1/topics/{QUEUE_TOPIC}")["records"]

    form.get_by_role("button", name="Redrive", exact=True).click()
    asked = _fill_token_if_asked(console, broker) or asked
    page.get_by_text(f"Moved 1 record(s) from {DEAD_LETTERS} to {QUEUE_TOPIC}").wait_for()
    assert _admin(broker, "GET", f"/api/v1/topics/{QUEUE_TOPIC}")["records"] == before + 1
    console.snapshot("queues-redrive")
    console.assert_clean(asked_for_the_token=asked)


def test_a_topic_made_through_the_form_is_listed(console: Console, broker: Broker) -> None:
    page = console.page
    console.open("/topics")
    form = page.locator("form[aria-label='Create a topic']")
    form.get_by_label("Name").fill("made.by-console")
    form.get_by_label("Partitions").fill("3")
    form.get_by_label("Partitions").press("Enter")
    page.locator("a[href='#/topics/made.by-console']").wait_for()
    page.get_by_text("Topic made.by-console created with 3 partition(s).").wait_for()
    assert _admin(broker, "GET", "/api/v1/topics/made.by-console")["partition_count"] == 3
    console.assert_clean()
