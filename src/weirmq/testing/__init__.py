"""Test helpers that ship with WeirMQ, for its own tests and for users' tests.

`Broker` runs a real broker inside the current process (see `weirmq.testing.broker`; the
pytest plugin in `pytest_plugin` offers it as the ``weirmq_broker`` fixture).
`ManualClock` steps time by hand; `weirmq.testing.records` builds and splits record
batches.
"""

from .broker import Broker
from .clock import ManualClock

__all__ = ["Broker", "ManualClock"]
