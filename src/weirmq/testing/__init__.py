"""Test helpers that ship with WeirMQ, for its own tests and for users' tests.

`Broker` runs a real broker inside the current process (see `weirmq.testing.broker`; the
pytest plugin in `pytest_plugin` offers it as the ``weirmq_broker`` fixture).
`ManualClock` steps time by hand and `ManualTimers` fires the broker's deadlines (fetch
long polls, group sessions) only when a test advances it; `weirmq.testing.records` builds
and splits record batches.
"""

from .broker import Broker
from .clock import ManualClock, ManualTimers

__all__ = ["Broker", "ManualClock", "ManualTimers"]
