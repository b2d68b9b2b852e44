"""Group-commit results reach the event loop in batches: `partition._Settler`.

The flusher thread answers every writer of one fsync round together; the settler queues
those results and wakes the loop once for the batch instead of once per writer.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from weirmq.broker import partition


def test_one_round_of_results_wakes_the_loop_once_and_settles_every_future() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        scheduled: list[Any] = []
        real = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any) -> Any:
            scheduled.append(callback)
            return real(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        settler = partition._Settler(loop)
        futures = [loop.create_future() for _ in range(3)]
        error = OSError("disk gone")

        def flusher_round() -> None:  # as the flusher thread answers one round
            settler.add(futures[0], 10)
            settler.add(futures[1], 20)
            settler.add(futures[2], error)

        thread = threading.Thread(target=flusher_round)
        thread.start()
        thread.join()
        assert len(scheduled) == 1  # one wake-up for the whole round
        done, _ = await asyncio.wait(futures, timeout=5)
        assert len(done) == 3
        assert [futures[0].result(), futures[1].result()] == [10, 20]
        assert futures[2].exception() is error
        settler.add(loop.create_future(), 30)  # the next round schedules again
        assert len(scheduled) == 2

    asyncio.run(scenario())


def test_a_result_for_a_closed_loop_is_dropped_quietly() -> None:
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    settler = partition._Settler(loop)
    loop.close()
    settler.add(future, 1)  # nobody waits any more: no error on the flusher thread
    assert not future.done()


def test_a_cancelled_waiter_is_left_as_it_is() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        settler = partition._Settler(loop)
        cancelled, waiting = loop.create_future(), loop.create_future()
        cancelled.cancel()  # its request's connection closed
        settler.add(cancelled, 1)
        settler.add(waiting, 2)
        assert await asyncio.wait_for(waiting, 5) == 2

    asyncio.run(scenario())
