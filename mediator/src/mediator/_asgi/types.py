"""The ASGI interface, as the middlewares see it, and what they share.

Typed here rather than imported: `mediator` depends on no web framework, and
these are the shapes every ASGI server and framework passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any, Final

__all__ = [
    "PRINCIPAL_SCOPE_KEY",
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "check_app",
    "check_challenge",
    "check_header_name",
    "send_problem",
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
# A header value a server sends as is: visible ASCII and spaces, no line break.
_CHALLENGE: Final = re.compile(r"[\x20-\x7e]+")


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


def check_challenge(value: object) -> str | None:
    """`value` as the ``WWW-Authenticate`` challenge of a 401, or None.

    Raises:
        TypeError: `value` is neither a string nor None.
        ValueError: It is empty, or holds a line break or a character a
            header value cannot carry.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(
            f"www_authenticate must be a string or None, got {type(value).__name__}"
        )
    if _CHALLENGE.fullmatch(value) is None:
        raise ValueError(
            "www_authenticate must be a non-empty header value of visible ASCII "
            "and spaces, without line breaks"
        )
    return value


async def send_problem(
    send: Send,
    status: int,
    title: str,
    detail: str,
    *,
    members: Mapping[str, object] | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with an RFC 9457 problem (``application/problem+json``).

    `members` are added to the body after its four standard ones; `headers`
    after its content type and length.
    """
    problem: dict[str, object] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if members:
        problem.update(members)
    body = json.dumps(problem).encode()
    head = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode("ascii")),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
