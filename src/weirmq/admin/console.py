"""The web console: a person's view of the broker, served by the admin listener at ``/``.

(Being built; see issue 23.) Its pages are static files shipped in the package
(``weirmq/admin/console/``) that call the admin API's JSON endpoints from the browser.
"""

from __future__ import annotations

from aiohttp import web


def routes() -> list[web.RouteDef]:
    """The console's routes, added to the admin application."""
    return []
