"""``weirmq status``: the cluster at a glance, like ``rpk cluster info`` and ``rpk cluster
health`` together.

Theory of operation: two sources, each optional in its own way.

- The Kafka side is one Metadata request (what every Kafka client sends first): the
  cluster id, the controller, the brokers with the addresses they advertise, the topics
  and their partitions. Any Kafka-compatible broker answers it. No answer is the command's
  failure: exit code 3, as for every client command.
- The broker's HTTP admin API (``--admin-url``, default http://127.0.0.1:9644) adds what
  Kafka's protocol does not carry: the version, the uptime and the health (``ok``,
  ``degraded`` when partitions are offline, ``stopping``). It is optional: a broker may run
  with the admin API off, or the command may talk to another Kafka broker; then the status
  says so and the exit code stays 0. The health document names its cluster, so an admin
  API that belongs to another cluster than ``--bootstrap`` (the default address on a
  machine with two brokers) is reported as such rather than trusted.
- A health other than ``ok`` from the right cluster is exit code 1, so ``weirmq status``
  can serve as a health check in scripts.

As in the other commands, the result is first gathered into plain data (the ``--json``
shape), then printed.
"""

from __future__ import annotations

from typing import Any

import click

from weirmq.cli.clients import (
    ADMIN_URL,
    EXIT_BROKER_ERROR,
    REQUEST_TIMEOUT_S,
    Bootstrap,
    admin_client,
    bootstrap_option,
    client_command_settings,
    json_option,
    kafka_errors,
)
from weirmq.cli.output import Column, note, plural, print_json, print_line, print_table

# The admin API is a nicety here: a short wait, then the status goes on without it.
ADMIN_HEALTH_TIMEOUT_S = 3.0
HEALTHY = "ok"


@click.command("status", **client_command_settings())
@bootstrap_option
@click.option(
    "--admin-url",
    "--admin",
    "admin_url",
    default=ADMIN_URL,
    show_default=True,
    envvar=["WEIRMQ_ADMIN_URL", "WEIRMQ_ADMIN"],
    metavar="URL",
    help="The broker's HTTP admin API, for its version, uptime and health.",
)
@click.option("--no-admin", is_flag=True, help="Do not ask the admin API.")
@json_option
def status(bootstrap: Bootstrap, admin_url: str, no_admin: bool, as_json: bool) -> None:
    """Show the cluster: its id, controller, brokers, topics and health.

    Exit code 1 when the admin API reports the broker unhealthy (offline partitions, or
    stopping); an admin API that does not answer is noted, not an error.
    """
    document = cluster_status(bootstrap)
    document["admin"] = None if no_admin else admin_health(admin_url, document["cluster_id"])
    if as_json:
        print_json(document)
    else:
        print_status(document)
    if unhealthy(document):
        raise SystemExit(EXIT_BROKER_ERROR)


def cluster_status(bootstrap: Bootstrap) -> dict[str, Any]:
    """Cluster id, controller, brokers and topic counts, from one Metadata request."""
    admin = admin_client(bootstrap)
    with kafka_errors("cannot read the cluster metadata", bootstrap):
        metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    brokers = [
        {
            "node_id": broker.id,
            "host": broker.host,
            "port": broker.port,
            "controller": broker.id == metadata.controller_id,
        }
        for broker in sorted(metadata.brokers.values(), key=lambda broker: broker.id)
    ]
    return {
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id if metadata.controller_id >= 0 else None,
        "brokers": brokers,
        "topics": len(metadata.topics),
        "partitions": sum(len(topic.partitions) for topic in metadata.topics.values()),
    }


def admin_health(admin_url: str, cluster_id: str | None) -> dict[str, Any]:
    """The admin API's health document, with whether it answered and whether it is the
    cluster of --bootstrap. Never raises: the admin API is optional."""
    found: dict[str, Any] = {"url": admin_url, "reachable": False, "error": None}
    try:
        health = fetch_health(admin_url)
    except AdminUnavailable as exc:
        found["error"] = str(exc)
        return found
    found["reachable"] = True
    found["same_cluster"] = cluster_id is None or health.get("cluster_id") == cluster_id
    for key in ("status", "version", "uptime_ms", "node_id", "cluster_id", "offline_partitions"):
        found[key] = health.get(key)
    return found


class AdminUnavailable(Exception):
    """The admin API did not answer, or not with a health document."""


def fetch_health(admin_url: str) -> dict[str, Any]:
    """GET /api/v1/health: 200 when healthy, 503 otherwise, both with the document."""
    import json
    import urllib.error
    import urllib.request

    url = admin_url.rstrip("/") + "/api/v1/health"
    try:
        with urllib.request.urlopen(url, timeout=ADMIN_HEALTH_TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except ValueError as exc:  # not a URL urllib can open
        raise AdminUnavailable(f"{admin_url!r} is not an http:// URL") from exc
    except OSError as exc:  # URLError, refused, timed out
        reason = getattr(exc, "reason", exc)
        raise AdminUnavailable(f"no answer ({reason})") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise AdminUnavailable("the answer is not JSON: is this WeirMQ's admin API?") from None
    if not isinstance(document, dict) or "status" not in document:
        raise AdminUnavailable("the answer is not a health document")
    return document


def unhealthy(document: dict[str, Any]) -> bool:
    admin = document.get("admin")
    if not admin or not admin["reachable"] or not admin["same_cluster"]:
        return False
    return bool(admin["status"] != HEALTHY)


# -- for people --------------------------------------------------------------------------------


def print_status(document: dict[str, Any]) -> None:
    brokers = document["brokers"]
    controller = document["controller_id"]
    print_line(
        f"Cluster {document['cluster_id'] or '(no id)'}: {plural(len(brokers), 'broker')}, "
        f"controller {'-' if controller is None else controller}"
    )
    print_line(f"Topics: {document['topics']}, partitions: {document['partitions']}")
    print_line("")
    print_table(
        [Column("BROKER", "right"), Column("ADDRESS"), Column("CONTROLLER")],
        [
            (str(b["node_id"]), _address(b["host"], b["port"]), "yes" if b["controller"] else "")
            for b in brokers
        ],
    )
    admin = document["admin"]
    if admin is None:
        return
    print_line("")
    print_line(admin_line(admin))
    if not admin["reachable"]:
        note(f"the admin API at {admin['url']} did not answer; set --admin-url or --no-admin")
    elif not admin["same_cluster"]:
        note(
            f"the admin API at {admin['url']} belongs to cluster {admin['cluster_id']}, "
            f"not {document['cluster_id']}; set --admin-url"
        )


def admin_line(admin: dict[str, Any]) -> str:
    """``Broker 0 (admin API http://...): ok, version 0.9.0, up 3h 12m, 0 offline partitions``."""
    where = f"admin API {admin['url']}"
    if not admin["reachable"]:
        return f"Admin API {admin['url']}: unreachable ({admin['error']})"
    parts = [
        str(admin["status"]),
        f"version {admin['version']}",
        f"up {format_duration_ms(int(admin['uptime_ms'] or 0))}",
        plural(int(admin["offline_partitions"] or 0), "offline partition"),
    ]
    return f"Broker {admin['node_id']} ({where}): {', '.join(parts)}"


def format_duration_ms(millis: int) -> str:
    """``45s``, ``12m 5s``, ``3h 12m``, ``2d 4h``: the two largest units."""
    seconds = millis // 1000
    units = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]
    parts: list[str] = []
    for name, size in units:
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append(f"{count}{name}")
        if len(parts) == 2:
            break
    return " ".join(parts) or "0s"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
