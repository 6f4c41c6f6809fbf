"""The ASGI interface, as the middlewares see it, and what they share.

Typed here rather than imported: `mediator` depends on no web framework, and
these are the shapes every ASGI server and framework passes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

__all__ = [
    "PRINCIPAL_SCOPE_KEY",
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "check_app",
    "check_header_name",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PRINCIPAL_SCOPE_KEY: Final = "mediator.principal"
"""Where `RequestContextMiddleware` leaves the request's principal in the scope.

`DomainErrorMiddleware` reads it to tell 401 from 403 when it wraps the
context middleware, outside the context the principal is set in.
"""

# RFC 9110 token characters.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def check_app(app: object) -> None:
    """Refuse an `app` that is not callable, naming the argument.

    Raises:
        TypeError: `app` is not callable.
    """
    if not callable(app):
        raise TypeError(f"app must be an ASGI application, got {type(app).__name__}")


def check_header_name(value: object, argument: str) -> bytes:
    """`value` as a lower-case header name, ready for ASGI headers.

    Raises:
        TypeError: `value` is not a string.
        ValueError: It is not an HTTP header name.
    """
    if not isinstance(value, str):
        raise TypeError(
            f"{argument} must be an HTTP header name, got {type(value).__name__}"
        )
    if _TOKEN.fullmatch(value) is None:
        raise ValueError(f"{argument} must be an HTTP header name, got {value!r}")
    return value.lower().encode("ascii")
