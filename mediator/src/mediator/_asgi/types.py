"""The ASGI interface, as the middlewares see it: type aliases only.

Typed here rather than imported: `mediator` depends on no web framework, and
these are the shapes every ASGI server and framework passes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

__all__ = [
    "PRINCIPAL_SCOPE_KEY",
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
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
