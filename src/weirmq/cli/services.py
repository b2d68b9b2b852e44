"""The HTTP services ``weirmq serve`` runs beside its Kafka and AMQP listeners: the admin
API (``admin_listen``) and the SQS API (``sqs_listen``).

Both are `weirmq.admin.deferred.DeferredService`s: the port is bound at start, before the
broker announces anything, and the code behind it (aiohttp and the service's application)
is imported on its first connection, so a broker that nobody asks over HTTP never pays for
it. Each announces one line, in the order of `http_services`, which is the order scripts
read them in: the admin line right after the Kafka one, then the SQS line
(`SQS_ANNOUNCEMENT`); the AMQP line stays last (`weirmq.server.run`).

A port that cannot be bound fails the start with a message naming its setting
(`ServicePort`): two brokers started with default settings collide on these ports, and
"address in use" alone sends the operator looking at the Kafka port.

This module imports only the standard library, `weirmq.settings` and
`weirmq.admin.deferred` (itself as light), and `weirmq.server.startup` when a start fails:
``weirmq serve`` and `weirmq.testing` import it before anything else of the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weirmq.admin.deferred import DeferredAdminService, DeferredService, LoadedService

if TYPE_CHECKING:
    from weirmq.broker.core import Broker
    from weirmq.settings import Settings

SQS_ANNOUNCEMENT = "weirmq: accepting SQS requests on "
"""The start of the SQS API's line; its URL follows (``http://HOST:PORT``)."""


class DeferredSqsService(DeferredService[LoadedService]):
    """`weirmq.protocols.sqs.http.SqsService`, loaded on the first connection to
    ``settings.sqs_listen`` (see `weirmq.admin.deferred`)."""

    setting = "sqs_listen"
    what = "SQS API"
    module_name = "weirmq.protocols.sqs.http"
    class_name = "SqsService"
    announcement = SQS_ANNOUNCEMENT


class ServicePort:
    """A deferred service whose bind failure names its setting (`listener_error`)."""

    def __init__(self, service: DeferredService[Any]) -> None:
        self.service = service

    async def start(self, broker: Broker) -> str | None:
        from weirmq.server.startup import listener_error

        try:
            return await self.service.start(broker)
        except OSError as exc:
            address = self.service.listen or ""
            setting = self.service.setting
            raise listener_error(self.service.what, address, setting, exc) from exc

    async def stop(self) -> None:
        await self.service.stop()


def http_services(settings: Settings) -> list[ServicePort]:
    """The services ``weirmq serve`` runs, in the order of their announcement lines; one
    whose address setting is None ("off") is left out."""
    deferred: list[DeferredService[Any]] = [
        DeferredAdminService(settings),
        DeferredSqsService(settings),
    ]
    return [ServicePort(service) for service in deferred if service.listen is not None]
