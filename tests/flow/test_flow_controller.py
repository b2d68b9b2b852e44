"""The flow controller, stepped by hand: watermarks with hysteresis, Kafka's quota
throttle, and the decisions that combine them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.flow.controller import ADMIT, PRESSURE_THROTTLE_MS_MAX, FlowController, Kind
from weirmq.flow.quotas import THROTTLE_MS_MAX, QuotaTable, QuotaWindow, RateMeter, throttle_ms
from weirmq.flow.watermarks import TRANSITIONS, Gauge, Pressure, Watermarks
from weirmq.types import RequestContext

MARKS = Watermarks(low=600, high=1000, resume=800)
CTX = RequestContext("app", "127.0.0.1", "kafka")


# --- watermarks -------------------------------------------------------------------------


def test_free_below_low_continuous_between_blocked_at_high() -> None:
    gauge = Gauge("memory", MARKS)
    assert (gauge.update(600), gauge.ratio) == (Pressure.FREE, 0.0)
    assert (gauge.update(700), gauge.ratio) == (Pressure.THROTTLED, 0.25)
    assert (gauge.update(900), gauge.ratio) == (Pressure.THROTTLED, 0.75)
    assert (gauge.update(1000), gauge.ratio) == (Pressure.BLOCKED, 1.0)


def test_blocked_stays_blocked_until_the_resume_mark() -> None:
    gauge = Gauge("memory", MARKS)
    gauge.update(1000)
    for level in (999, 900, 801):
        assert (gauge.update(level), gauge.ratio) == (Pressure.BLOCKED, 1.0)
    assert gauge.update(800) is Pressure.THROTTLED
    assert gauge.ratio == 0.5
    assert gauge.update(100) is Pressure.FREE


def test_a_blocked_resource_that_empties_at_once_is_free() -> None:
    gauge = Gauge("memory", MARKS)
    gauge.update(5000)
    assert gauge.update(0) is Pressure.FREE


@given(st.lists(st.integers(min_value=-60, max_value=60), min_size=1, max_size=200))
def test_jitter_around_the_high_mark_blocks_once(jitter: list[int]) -> None:
    """A level wobbling within less than high - resume of the high mark changes state at
    most once after it first blocks: no oscillation around one threshold."""
    gauge = Gauge("memory", MARKS)
    gauge.update(MARKS.high)
    before = gauge.transitions
    for delta in jitter:
        gauge.update(MARKS.high + delta * 3)  # within 180 of high; resume is 200 below
    assert gauge.transitions == before
    assert gauge.state is Pressure.BLOCKED


@given(st.lists(st.integers(min_value=0, max_value=2000), min_size=1, max_size=100))
def test_every_move_is_a_row_of_the_table_and_the_ratio_stays_in_range(levels: list[int]) -> None:
    gauge = Gauge("disk", MARKS)
    for level in levels:
        before = gauge.state
        after = gauge.update(level)
        assert after is before or after in {target for target, _ in TRANSITIONS[before]}
        assert 0.0 <= gauge.ratio <= 1.0
        if level <= MARKS.low:
            assert after is Pressure.FREE
        if level >= MARKS.high:
            assert after is Pressure.BLOCKED


def test_marks_are_checked() -> None:
    with pytest.raises(ValueError, match="low < high"):
        Watermarks(10, 10)
    with pytest.raises(ValueError, match="resume"):
        Watermarks(10, 20, resume=20)
    assert Watermarks.of_budget(1000) == Watermarks(600, 1000, 800)


# --- quotas ------------------------------------------------------------------------------


def test_kafkas_throttle_formula() -> None:
    assert throttle_ms(100.0, 100.0, 11_000) == 0
    assert throttle_ms(150.0, 100.0, 11_000) == 5_500  # (150 - 100) / 100 * 11 s
    assert throttle_ms(1e9, 1.0, 11_000) == THROTTLE_MS_MAX


def test_a_rate_meter_forgets_old_samples() -> None:
    window = QuotaWindow(sample_ms=1000, window_count=3)
    meter = RateMeter(window, now_ms=0)
    meter.record(3000, now_ms=0)
    assert meter.rate(now_ms=500) == 3000.0  # young: over one sample
    assert meter.rate(now_ms=2500) == 1200.0  # over 2.5 s
    assert meter.rate(now_ms=10_000) == 0.0  # the sample left the window


def test_a_client_over_its_quota_is_throttled_back_to_it() -> None:
    quotas = QuotaTable(QuotaWindow(sample_ms=1000, window_count=11))
    quotas.set_quota(None, "produce_bytes", 1000)  # the default for every client
    quotas.set_quota("vip", "produce_bytes", 1_000_000)
    for second in range(11):
        asked = quotas.record("app", "produce_bytes", 2000, second * 1000)
    # 22,000 B over the 10 s the meter has existed: 2,200 B/s against 1,000 B/s, so
    # (2200 - 1000) / 1000 * 10 s of silence brings the window back to the quota.
    assert asked == 12_000
    assert quotas.record("vip", "produce_bytes", 2000, 11_000) == 0
    assert quotas.record("app", "fetch_bytes", 10**9, 11_000) == 0  # no fetch quota


# --- decisions ---------------------------------------------------------------------------


def test_no_pressure_and_no_quota_admits() -> None:
    assert FlowController().decide(CTX, Kind.PRODUCE, 1000, 0, ["t"]) is ADMIT


def test_pressure_throttles_publishes_only() -> None:
    flow = FlowController()
    flow.guard("memory", MARKS)
    flow.update("memory", 900)
    decision = flow.decide(CTX, Kind.PRODUCE, 1000, 0, ["t"])
    assert decision.throttle_ms == int(0.75 * PRESSURE_THROTTLE_MS_MAX)
    assert decision.reason == "memory" and not decision.wait_for
    assert flow.decide(CTX, Kind.FETCH, 1000, 0) is ADMIT
    assert flow.decide(CTX, Kind.OTHER, 100, 0) is ADMIT


def test_a_blocked_backlog_makes_publishes_to_its_topic_wait() -> None:
    flow = FlowController()
    flow.guard("backlog:orders", Watermarks(1000, 2000))
    flow.update("backlog:orders", 2500)
    waiting = flow.decide(CTX, Kind.PRODUCE, 10, 0, ["orders"])
    assert waiting.wait_for == {"backlog:orders"}
    assert waiting.throttle_ms == PRESSURE_THROTTLE_MS_MAX
    assert flow.decide(CTX, Kind.PRODUCE, 10, 0, ["other"]) is ADMIT
    flow.update("backlog:orders", 900)
    assert flow.decide(CTX, Kind.PRODUCE, 10, 0, ["orders"]) is ADMIT
    assert flow.throttled_requests == 1
    assert flow.gauges["backlog:orders"].level == 910, "an admitted publish is charged"
    flow.decide(CTX, Kind.PRODUCE, 1100, 0, ["orders"])
    assert flow.blocked(["backlog:orders"]), "not blocked once admitted publishes reach it"


def test_a_resource_that_does_not_hold_throttles_but_never_makes_publishes_wait() -> None:
    flow = FlowController()
    flow.guard("disk", Watermarks(1000, 2000), hold=False)
    flow.update("disk", 2500)
    decision = flow.decide(CTX, Kind.PRODUCE, 10, 0, [])
    assert decision.throttle_ms == PRESSURE_THROTTLE_MS_MAX and not decision.wait_for
    assert flow.blocked(["disk"]) == {"disk"}
    flow.unguard("disk")
    flow.guard("disk", Watermarks(1000, 2000))  # guarded again, holding
    flow.update("disk", 2500)
    assert flow.decide(CTX, Kind.PRODUCE, 10, 0, []).wait_for == {"disk"}


def test_the_largest_throttle_wins() -> None:
    quotas = QuotaTable(QuotaWindow(sample_ms=1000, window_count=2))
    quotas.set_quota("app", "request", 1)
    flow = FlowController(quotas)
    flow.guard("disk", MARKS)
    flow.update("disk", 700)
    for _ in range(3):
        decision = flow.decide(CTX, Kind.PRODUCE, 10, 0, [])
    assert decision.reason == "quota request"
    assert decision.throttle_ms > int(0.25 * PRESSURE_THROTTLE_MS_MAX)
