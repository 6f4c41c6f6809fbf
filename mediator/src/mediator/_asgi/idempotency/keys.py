"""The key of a request: its header value parsed, and who and what it is kept for."""

from __future__ import annotations

import hashlib
import re
from typing import Final

from mediator._asgi.types import PRINCIPAL_SCOPE_KEY, Scope
from mediator._behaviors.idempotency.store import MAX_KEY_LENGTH
from mediator._core.context import Principal, current_principal

__all__ = [
    "MALFORMED",
    "Malformed",
    "fingerprint",
    "parsed_key",
    "principal_of",
]

_VISIBLE: Final = re.compile(rb"[!-~]{1,%d}" % MAX_KEY_LENGTH)
# An RFC 8941 string (the IETF draft's form of the header): "..." with \" and \\.
_SF_STRING: Final = re.compile(rb'"((?:[ !#-\[\]-~]|\\["\\])*)"')
_SF_ESCAPE: Final = re.compile(rb'\\(["\\])')


class Malformed:
    """The header was sent, but is no key (the marker `_key_of` returns)."""


MALFORMED: Final = Malformed()


def parsed_key(raw: bytes) -> str | Malformed:
    """The key in a header value, plain or an RFC 8941 string; else malformed."""
    value = raw.strip(b" \t")
    if value.startswith(b'"'):
        quoted = _SF_STRING.fullmatch(value)
        if quoted is None:
            return MALFORMED
        value = _SF_ESCAPE.sub(rb"\1", quoted[1])
    if _VISIBLE.fullmatch(value) is None:
        return MALFORMED
    return value.decode("ascii")


def principal_of(scope: Scope) -> Principal | None:
    """The caller: the context's principal, else the one left in the scope."""
    principal = current_principal()
    if principal is None:
        found = scope.get(PRINCIPAL_SCOPE_KEY)
        principal = found if isinstance(found, Principal) else None
    return principal


def fingerprint(scope: Scope, body: bytes) -> str:
    """SHA-256 of the query string and the body: what makes the request."""
    query = bytes(scope.get("query_string", b""))
    digest = hashlib.sha256(b"%d:" % len(query))
    digest.update(query)
    digest.update(body)
    return digest.hexdigest()
