"""SASL for Connection.StartOk: PLAIN and AMQPLAIN against a table of users.

Both mechanisms carry a user name and a password in the clear, in one step (no
Connection.Secure round trip):

- PLAIN (RFC 4616): `authzid NUL authcid NUL password`; the authorisation identity is
  ignored, as RabbitMQ ignores it. pika, aio-pika and kombu use PLAIN by default;
- AMQPLAIN (RabbitMQ's, used by older py-amqp and some kombu setups): the body of a field
  table, without its length prefix, with the keys LOGIN and PASSWORD.

The outcome is the user's name, or None; why it failed is for the broker's log, never for
the client, which gets RabbitMQ's one reply whatever the reason (a client must not learn
which user names exist). Passwords are compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import struct
from collections.abc import Mapping
from typing import NamedTuple

from pamqp import decode


class Login(NamedTuple):
    user: str | None
    """Who logged in; None when refused."""
    reason: str
    """Why refused, for the log ("" when accepted)."""


def authenticate(mechanism: str, response: str | bytes, users: Mapping[str, str]) -> Login:
    """Check a StartOk's `response` for `mechanism` against `users`."""
    raw = response.encode() if isinstance(response, str) else response
    if mechanism == "PLAIN":
        credentials = _plain(raw)
    elif mechanism == "AMQPLAIN":
        credentials = _amqplain(raw)
    else:
        return Login(None, f"unknown authentication mechanism {mechanism!r}")
    if credentials is None:
        return Login(None, f"malformed {mechanism} response")
    user, password = credentials
    expected = users.get(user)
    # Compare with something even for an unknown user, so timing says nothing either.
    matches = hmac.compare_digest(password.encode(), (expected or "\x00").encode())
    if expected is None or not matches:
        return Login(None, f"user {user!r}: unknown user or wrong password")
    return Login(user, "")


def _plain(raw: bytes) -> tuple[str, str] | None:
    parts = raw.split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        return None


def _amqplain(raw: bytes) -> tuple[str, str] | None:
    try:
        _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
    except Exception:  # pamqp's decoder raises more than ValueError on garbage
        return None
    user, password = table.get("LOGIN"), table.get("PASSWORD")
    if isinstance(user, bytes):
        user = user.decode(errors="replace")
    if isinstance(password, bytes):
        password = password.decode(errors="replace")
    if not isinstance(user, str) or not isinstance(password, str):
        return None
    return user, password


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, as the connection pump reports it) is a loopback
    address; an unknown host ("") is not."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # "::ffff:127.0.0.1" on a dual-stack socket
    return address.is_loopback
