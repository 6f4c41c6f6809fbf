"""The WSGI interface, as the middlewares see it, and what they share.

The types are the standard library's (`wsgiref.types`), which Flask's and
Django's apps satisfy: `mediator` depends on no web framework.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, MutableMapping
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from mediator._asgi.problem import Problem, send_problem
from mediator._asgi.stack import enter_stack as enter_asgi_stack
from mediator._asgi.types import Message

__all__ = [
    "StartResponse",
    "WSGIApplication",
    "WSGIEnvironment",
    "WatchedStart",
    "enter_stack",
    "environ_key",
    "header_bytes",
    "problem_response",
    "status_code",
]


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


class WatchedStart:
    """A WSGI app's ``start_response``, wrapped: `started` tells it was called.

    With `echo`, a ``(name, value)`` header the app did not set itself (names
    compared without case) is added to the answer.
    """

    __slots__ = ("_echo", "_lowered", "_start", "started")

    def __init__(
        self, start_response: StartResponse, echo: tuple[str, str] | None = None
    ) -> None:
        self._start = start_response
        self._echo = echo
        self._lowered = None if echo is None else echo[0].lower()
        self.started = False

    def __call__(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        """Start the answer through the server's ``start_response``."""
        self.started = True
        echo = self._echo
        if echo is not None and all(
            name.lower() != self._lowered for name, _ in headers
        ):
            headers = [*headers, echo]
        if exc_info is None:
            return self._start(status, headers)
        return self._start(status, headers, exc_info)


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


def problem_response(problem: Problem) -> tuple[str, list[tuple[str, str]], bytes]:
    """The status line, headers and body of the ASGI middlewares' problem answer.

    Written by their own `send_problem`, so both interfaces answer alike to
    the byte.
    """
    messages: list[Message] = []

    async def collect(message: Message) -> None:
        messages.append(message)

    _run_at_once(send_problem(collect, problem))
    start, body = messages
    head = [
        (bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
        for name, value in start["headers"]
    ]
    return f"{problem.status} {problem.title}", head, bytes(body["body"])


def _run_at_once(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run `coroutine`, which awaits nothing that suspends, to its end."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()  # pragma: no cover - `collect` never suspends
    raise RuntimeError("the problem writer suspended")  # pragma: no cover
