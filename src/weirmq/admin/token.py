"""The admin API's bearer token: where it comes from, and how a request's is checked.

Theory of operation
-------------------
The admin API changes and deletes things; on loopback any web page the operator opens can
reach it (the Host, Origin and Content-Type checks of `weirmq.admin.http` stop what a
browser sends on a page's behalf), and off loopback anyone on the network can. So a
request that destroys (a DELETE, an offsets reset, a trim, a redrive) must carry
``Authorization: Bearer <token>``, and off loopback every request must, but the health
check and the console's static files.

The token is ``settings.admin_token`` when set. Otherwise the broker makes one at its
first start (`secrets.token_urlsafe`, 256 bits) and keeps it in ``<data_dir>/admin-token``
(mode 0600, made with ``O_EXCL``, so two starts racing agree on one), and reuses it on
every later start: a console bookmarked with it keeps working across restarts. Whoever
can read the data directory can act as the broker's administrator, which they can anyway.

Only the header is taken, never a cookie: a browser sends cookies with requests other
sites make, and a header it sends only when a script of this origin sets it.

This module imports only the standard library and `weirmq.settings`: the deferred admin
service (`weirmq.admin.deferred`) names the token's place in its announcement before
aiohttp is loaded.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from weirmq.settings import Settings

TOKEN_FILE = "admin-token"
"""The file in the data directory holding the token the broker made."""
TOKEN_BYTES = 32
"""Random bytes of a token the broker makes (43 characters of base64url)."""
TOKEN_FILE_BYTES_MAX = 4096
"""More than any token; a larger file is not one of ours and is refused."""
SETTING_SOURCE = "the admin_token setting"


@dataclass(frozen=True, slots=True)
class AdminToken:
    """The token, and where an operator finds it (for messages and the announcement)."""

    value: str
    source: str
    """``the admin_token setting`` or the token file's path."""

    def __repr__(self) -> str:  # never the secret itself
        return f"AdminToken(source={self.source!r})"

    def matches(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries this token, compared in constant
        time (`hmac.compare_digest`) so the answer's timing tells nothing of it."""
        if header is None:
            return False
        scheme, _, given = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.value.encode())


def load_or_create(settings: Settings) -> AdminToken:
    """The token of `settings`: the setting, else the data directory's file, made now
    when missing. Raises `OSError` when the file cannot be read or made, and `ValueError`
    when it holds no usable token (a broker must not start with an API nobody can use)."""
    if settings.admin_token is not None:
        return AdminToken(settings.admin_token, SETTING_SOURCE)
    path = Path(settings.data_dir) / TOKEN_FILE
    try:
        return AdminToken(_read(path), str(path))
    except FileNotFoundError:
        pass
    made = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        _write_new(path, made)
    except FileExistsError:  # another start made it first: use theirs
        return AdminToken(_read(path), str(path))
    return AdminToken(made, str(path))


def _read(path: Path) -> str:
    with path.open("rb") as file:
        data = file.read(TOKEN_FILE_BYTES_MAX + 1)
    text = data.decode("ascii", "replace").strip()
    if not text or len(data) > TOKEN_FILE_BYTES_MAX or any(c.isspace() for c in text):
        raise ValueError(
            f"{path} does not hold an admin token; delete it to have a new one made, "
            "or set admin_token"
        )
    return text


def _write_new(path: Path, token: str) -> None:
    """Create `path` (never overwrite it) readable by its owner only, and fsync it with
    its directory, so the token shown to the operator survives a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
