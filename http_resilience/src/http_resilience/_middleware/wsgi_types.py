"""The WSGI interface, as the middlewares see it, and what they share.

The types are the standard library's (`wsgiref.types`), which Flask's and
Django's apps satisfy: `http_resilience` depends on no web framework.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine, Iterator, MutableMapping, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from http_resilience._middleware.asgi import send_problem
from http_resilience._middleware.types import Message

if TYPE_CHECKING:
    from _typeshed import OptExcInfo
from http_resilience._middleware.stack import enter_stack as enter_asgi_stack

__all__ = [
    "StartResponse",
    "WSGIApplication",
    "WSGIEnvironment",
    "WatchedStart",
    "check_app",
    "enter_stack",
    "environ_key",
    "header_bytes",
    "problem_response",
    "start_problem",
    "status_code",
]

Write = Callable[[bytes], object]


def check_app(app: object) -> None:
    """Refuse an `app` that is not callable, naming the argument.

    Raises:
        TypeError: `app` is not callable.
    """
    if not callable(app):
        raise TypeError(f"app must be a WSGI application, got {type(app).__name__}")


class _AsHttpScope(MutableMapping[str, Any]):
    """The environ as the order check reads a scope: an ``http`` one.

    The check passes other ASGI scopes (``lifespan``) through; every WSGI
    call is an HTTP request. What it records lands in the environ itself.
    """

    __slots__ = ("_environ",)

    def __init__(self, environ: WSGIEnvironment) -> None:
        self._environ = environ

    def __getitem__(self, key: str) -> Any:
        return "http" if key == "type" else self._environ[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._environ[key] = value

    def __delitem__(self, key: str) -> None:
        del self._environ[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)


def enter_stack(environ: WSGIEnvironment, name: str) -> None:
    """Record that middleware `name` is entered; refuse a misordered stack.

    The rule and the environ key (``"resilience.middleware_stack"``) are the
    ASGI middlewares'.

    Raises:
        MiddlewareOrderError: A middleware that belongs inside `name` was
            entered before it, for the same request.
    """
    enter_asgi_stack(_AsHttpScope(environ), name)


def environ_key(header: str) -> str:
    """Where a WSGI server puts request header `header`: ``HTTP_X_NAME``."""
    return "HTTP_" + header.upper().replace("-", "_")


def header_bytes(value: object) -> bytes | None:
    """An environ value as the bytes the caller sent; None if it is no header.

    WSGI servers give header values as strings of Latin-1 code points.
    """
    if not isinstance(value, str):
        return None
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return None


def status_code(status: str) -> int:
    """The number of a WSGI status line (``"404 Not Found"``); 0 if it has none."""
    head = status[:3]
    return int(head) if head.isdigit() else 0


def problem_response(
    status: HTTPStatus,
    wait: float | None,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> tuple[str, list[tuple[str, str]], bytes]:
    """The status line, headers and body of the ASGI middlewares' problem answer.

    Written by their own `send_problem`, so both interfaces answer alike to
    the byte.
    """
    messages: list[Message] = []

    async def collect(message: Message) -> None:
        messages.append(message)

    _run_at_once(send_problem(collect, status, wait, extra))
    start, body = messages
    head = [
        (bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
        for name, value in start["headers"]
    ]
    return f"{status.value} {status.phrase}", head, bytes(body["body"])


def start_problem(
    start_response: StartResponse,
    status: HTTPStatus,
    wait: float | None,
    replacing: OptExcInfo | None,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> bytes:
    """Start the problem answer (`problem_response`) in place of any begun; its body."""
    line, headers, body = problem_response(status, wait, extra)
    start_response(line, headers, replacing)
    return body


class WatchedStart:
    """The ``start_response`` an app is given: it notes that the app called it.

    Args:
        start_response: The server's.
        more: Told the status, the headers to add to the app's; None adds none.
    """

    __slots__ = ("_more", "_start_response", "started")

    def __init__(
        self,
        start_response: StartResponse,
        more: Callable[[str], Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        self._start_response = start_response
        self._more = more
        self.started = False

    def __call__(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Write:
        """Start the answer through the server's ``start_response``."""
        self.started = True
        added = () if self._more is None else self._more(status)
        if added:
            headers = [*headers, *added]
        if exc_info is None:
            return self._start_response(status, headers)
        return self._start_response(status, headers, exc_info)

    def replacing(self) -> OptExcInfo | None:
        """The error being handled, to replace a begun answer with; None if none."""
        return sys.exc_info() if self.started else None


def _run_at_once(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run `coroutine`, which awaits nothing that suspends, to its end."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()  # pragma: no cover - `collect` never suspends
    raise RuntimeError("the problem writer suspended")  # pragma: no cover
