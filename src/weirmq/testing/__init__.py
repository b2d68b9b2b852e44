"""Test helpers that ship with WeirMQ, for its own tests and for users' tests.

`ManualClock` steps time by hand; `weirmq.testing.records` builds and splits record
batches. (An in-process broker joins them once the server exists.)
"""

from .clock import ManualClock

__all__ = ["ManualClock"]
