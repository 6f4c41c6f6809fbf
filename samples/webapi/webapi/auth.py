"""A STAND-IN for authentication: the caller names itself. Replace it.

The orders service keeps each caller's ``Idempotency-Key`` apart from every
other caller's, so it must know who calls. This sample has no users, so
`demo_principal` believes whatever a caller says: the bearer token of
``Authorization: Bearer <caller id>`` is taken as the caller's id, unchecked.
That is right for a demo on 127.0.0.1 and for nothing else: anyone can send
any id. A real service checks a credential here instead (a signed token, a
session, Starlette's ``AuthenticationMiddleware`` and ``scope["user"]``) and
returns the `Principal` it proves, or None.

A request with no token, or with one that is not 1 to 64 visible ASCII
characters, has no principal: ``POST /orders`` answers it 401.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.types import Scope

from mediator import Principal

__all__ = ["CHALLENGE", "demo_principal"]

CHALLENGE: Final = 'Bearer realm="orders"'
"""The ``WWW-Authenticate`` challenge of a 401: how to call again."""

_TOKEN: Final = re.compile(rb"[Bb]earer ([!-~]{1,64})")


def demo_principal(scope: Scope) -> Principal | None:
    """The caller named by the request's bearer token, unchecked (a stand-in).

    Args:
        scope: The request's ASGI scope.

    Returns:
        ``Principal(<token>)``, or None without a well-formed token (or with
        the header sent twice, which names no one caller).

    Example:
        >>> scope = {"headers": [(b"authorization", b"Bearer alice")]}
        >>> demo_principal(scope)
        Principal(id='alice', roles=frozenset(), claims={})
        >>> demo_principal({"headers": []}) is None
        True
    """
    sent = [value for name, value in scope["headers"] if name == b"authorization"]
    if len(sent) != 1:
        return None
    found = _TOKEN.fullmatch(sent[0])
    return None if found is None else Principal(found[1].decode("ascii"))
