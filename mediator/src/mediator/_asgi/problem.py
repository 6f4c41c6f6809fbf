"""What every web middleware checks of its options, and how it answers a problem.

The ASGI and WSGI middlewares share these: one wording for each rule their
options keep, and one RFC 9457 body (`send_problem`; `mediator._wsgi.types`
collects it for a WSGI answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from mediator._asgi.types import Send

__all__ = [
    "Problem",
    "check_app",
    "check_callable",
    "check_challenge",
    "check_header_name",
    "send_problem",
]

# RFC 9110 token characters.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A header value a server sends as is: visible ASCII and spaces, no line break.
_CHALLENGE: Final = re.compile(r"[\x20-\x7e]+")


def check_callable(value: object, rule: str) -> None:
    """Refuse a `value` that is not callable: `rule`, and the type it has.

    `rule` says what the argument must be, such as ``"app must be an ASGI
    application"``.

    Raises:
        TypeError: `value` is not callable.
    """
    if not callable(value):
        raise TypeError(f"{rule}, got {type(value).__name__}")


def check_app(app: object, kind: str = "an ASGI application") -> None:
    """Refuse an `app` that is not callable, naming the argument and its `kind`.

    Raises:
        TypeError: `app` is not callable.
    """
    check_callable(app, f"app must be {kind}")


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


@dataclass(frozen=True, slots=True)
class Problem:
    """One RFC 9457 answer: its status, its fixed wording, what it adds.

    The ``title`` is the status's reason phrase (RFC 9110). `members` are
    added to the body after its four standard ones; `headers` after its
    content type and length.
    """

    status: int
    detail: str
    members: Mapping[str, object] | None = None
    headers: Sequence[tuple[bytes, bytes]] = ()

    @property
    def title(self) -> str:
        """The reason phrase of `status`, such as ``"Not Found"``."""
        return _REASONS[self.status]


_REASONS: Final = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
"""RFC 9110's reason phrase of each status a middleware answers with."""


async def send_problem(send: Send, problem: Problem) -> None:
    """Answer with `problem` (``application/problem+json``)."""
    body: dict[str, object] = {
        "type": "about:blank",
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
    }
    if problem.members:
        body.update(problem.members)
    encoded = json.dumps(body).encode()
    head = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(encoded)).encode("ascii")),
        *problem.headers,
    ]
    status = problem.status
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": encoded})
