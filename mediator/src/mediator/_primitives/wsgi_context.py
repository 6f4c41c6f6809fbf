"""Run a WSGI app, and iterate the body it returns, in one request's context.

A WSGI app returns its body as an iterable the server reads after the call
(Flask streams, Django's streaming answers): the context variables a
middleware sets for the request must hold while the body is read, and be
reset only when the server closes it. So each request gets a copy of the
context; the app is called in it, every ``next`` of its body runs in it, and
so does ``close``, which leaves the blocks entered for the request (each
context variable is reset in the context it was set in). Nothing leaks into
the server's thread, whichever thread reads the body.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

__all__ = ["ContextBody", "serve_in_context"]


def serve_in_context(start: Callable[[ExitStack], Iterable[bytes]]) -> ContextBody:
    """Call `start` in a copy of the current context; read its body in it too.

    `start` enters the request's blocks on the stack it is given, and calls
    the app. When it raises, the blocks are left at once and the error
    passes on; else they are left when the server closes the body.
    """
    context = contextvars.copy_context()
    return context.run(_start, context, start)


def _start(
    context: contextvars.Context, start: Callable[[ExitStack], Iterable[bytes]]
) -> ContextBody:
    with ExitStack() as stack:
        body = start(stack)
        try:
            iterator = iter(body)
        except BaseException:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            raise
        return ContextBody(body, iterator, context, stack.pop_all())


@dataclass(eq=False, slots=True)
class ContextBody:
    """A WSGI body read, and closed, in the context its request ran in.

    Args:
        _body: The app's body.
        _iterator: The body's iterator, made in the request's context.
        _context: The request's context.
        _stack: The blocks entered for the request, left on `close`.
    """

    _body: Iterable[bytes]
    _iterator: Iterator[bytes]
    _context: contextvars.Context
    _stack: ExitStack
    _closed: bool = field(default=False, init=False)

    def __iter__(self) -> ContextBody:
        return self

    def __next__(self) -> bytes:
        return self._context.run(next, self._iterator)

    def close(self) -> None:
        """Close the app's body, then leave the request's blocks; once."""
        if not self._closed:
            self._closed = True
            self._context.run(self._close)

    def __del__(self) -> None:
        # A server that never closed the body (against PEP 3333): its blocks
        # are still left in their own context, not in the collector's.
        self.close()

    def _close(self) -> None:
        with self._stack:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
