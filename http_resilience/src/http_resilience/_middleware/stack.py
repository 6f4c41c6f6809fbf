"""The order of the web middlewares, checked first in each one's ``__call__``.

The table, the message and the scope key are in `_primitives.stack_order`, a copy
of ``tools/primitives/stack_order.py`` that `mediator` keeps too: neither package
imports the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from http_resilience._primitives.stack_order import misplaced

__all__ = ["MiddlewareOrderError", "enter_stack", "entered"]


class MiddlewareOrderError(Exception):
    """A web middleware runs outside one that belongs outside it.

    Raised on every request the misordered stack gets, before the app runs;
    the message names the order to use and how to write it with
    ``add_middleware``. Not a `ResilienceError`: it is a mistake in how the
    service is put together, not an outage, and must not be answered 503.
    """


def enter_stack(scope: MutableMapping[str, Any], name: str) -> None:
    """Record that middleware `name` is entered; refuse a misordered stack.

    Raises:
        MiddlewareOrderError: A middleware that belongs inside `name` was
            entered before it, in the same stack.
    """
    refusal = misplaced(scope, name)
    if refusal is not None:
        raise MiddlewareOrderError(refusal)


async def entered(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    name: str,
) -> bool:
    """Record that middleware `name` is entered; refuse a misordered stack.

    On the ``lifespan`` scope a misordered stack answers the server's startup
    as failed, with the refusal as its message (uvicorn logs it and exits), so
    the mistake is found before the first request, and False is returned: the
    middleware does not call the app. True otherwise.

    Raises:
        MiddlewareOrderError: On an ``http`` scope, a middleware that belongs
            inside `name` was entered before it, in the same stack.
    """
    refusal = misplaced(scope, name)
    if refusal is None:
        return True
    if scope.get("type") != "lifespan":
        raise MiddlewareOrderError(refusal)
    message = await receive()
    if message.get("type") == "lifespan.startup":
        await send({"type": "lifespan.startup.failed", "message": refusal})
    return False
