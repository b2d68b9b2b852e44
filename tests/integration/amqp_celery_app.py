"""The Celery app of test_amqp_celery.py: its worker runs `celery -A amqp_celery_app worker`.

`make_app(broker_url)` builds the app; the test process builds its own (the client that
sends tasks and reads results), and the worker process gets one at import, from the URL in
``AMQP_CELERY_BROKER_URL``, which the test sets (and ``AMQP_CELERY_NATIVE_DELAYED=1`` for
the variant with native delayed delivery). Tasks are registered under fixed names, so both
sides agree on them without importing each other.

Apart from the broker and the `rpc://` result backend, the app keeps Celery's defaults:
the worker runs its default bootsteps (mingle, gossip, heartbeat events, remote control),
and its result, remote-control and event queues are declared with the x-expires and
x-message-ttl arguments Celery gives them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

BROKER_URL_ENV = "AMQP_CELERY_BROKER_URL"
NATIVE_DELAYED_ENV = "AMQP_CELERY_NATIVE_DELAYED"
ADD = "weirmq_test.add"
FLAKY = "weirmq_test.flaky"
STAMP = "weirmq_test.stamp"


def make_app(broker_url: str, *, native_delayed_delivery: bool = False) -> Celery:
    app = Celery("amqp_celery_app")
    app.conf.update(
        broker_url=broker_url,
        # Results come back over AMQP: a reply queue per client, named by the client,
        # to which the worker publishes through the default exchange.
        result_backend="rpc://",
        # A broker that is not there fails the worker at once instead of retrying.
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=10,
    )
    if native_delayed_delivery:
        # Celery 5.5+ delays tasks (countdown, eta, retry) on the broker when its queues
        # are quorum queues: kombu declares 28 topic exchanges and queues
        # (celery_delayed_0..27, x-message-ttl 2**level seconds, x-overflow
        # reject-publish, each dead-lettering into the next level), chained by
        # exchange-to-exchange bindings, and binds the task queues to
        # celery_delayed_delivery. It skips direct exchanges, hence the topic exchange.
        app.conf.update(
            task_default_queue_type="quorum",
            task_default_exchange_type="topic",
            broker_native_delayed_delivery_queue_type="quorum",
        )
    else:
        # Classic queues (Celery's default, stated so that it stays so): Celery sets up no
        # native delayed delivery, and the worker itself holds a delayed task,
        # unacknowledged, until it is due (raising its prefetch with a global basic.qos),
        # as Celery did before 5.5. That is what the main tests use, so that countdowns
        # and retries do not depend on WeirMQ's TTL queues, dead-lettering and
        # exchange-to-exchange bindings at all; the native variant tests those.
        app.conf.task_default_queue_type = "classic"

    # shared=False: a shared task is added to every Celery app made later in this process
    # (the SQS tests' apps too), where another make_app's closure of the same name clashes.
    @app.task(name=ADD, shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name=FLAKY, bind=True, max_retries=3, shared=False)
    def flaky(self: Any) -> dict[str, Any]:
        """Fails its first attempt and asks to be retried a second later."""
        if self.request.retries == 0:
            raise self.retry(countdown=1, exc=RuntimeError("first attempt fails"))
        return {"retries": self.request.retries, "ran_at": time.time()}

    @app.task(name=STAMP, shared=False)
    def stamp() -> float:
        """When it ran (the wall clock, which the test process shares)."""
        return time.time()

    return app


if BROKER_URL_ENV in os.environ:  # the worker process
    app = make_app(
        os.environ[BROKER_URL_ENV],
        native_delayed_delivery=os.environ.get(NATIVE_DELAYED_ENV) == "1",
    )
