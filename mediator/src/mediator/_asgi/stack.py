"""The order of the web middlewares, checked first in each one's ``__call__``.

The table, the message and the scope key are in `_primitives.stack_order`, a copy
of ``tools/primitives/stack_order.py`` that `http_resilience` keeps too: neither
package imports the other.
"""

from __future__ import annotations

from mediator._asgi.types import ASGIApp, Receive, Scope, Send
from mediator._core.errors import ConfigurationError
from mediator._primitives.stack_order import misplaced

__all__ = ["MiddlewareOrderError", "enter_stack", "entered", "entered_http"]


class MiddlewareOrderError(ConfigurationError):
    """A web middleware runs outside one that belongs outside it.

    Raised on every request the misordered stack gets, before the app runs;
    the message names the order to use and how to write it with
    ``add_middleware``.
    """


def enter_stack(scope: Scope, name: str) -> None:
    """Record that middleware `name` is entered; refuse a misordered stack.

    Raises:
        MiddlewareOrderError: A middleware that belongs inside `name` was
            entered before it, in the same stack.
    """
    refusal = misplaced(scope, name)
    if refusal is not None:
        raise MiddlewareOrderError(refusal)


async def entered(scope: Scope, receive: Receive, send: Send, name: str) -> bool:
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


async def entered_http(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, name: str
) -> bool:
    """`entered`, then any scope but ``http`` passed to `app` untouched.

    True when middleware `name` handles this request itself: an ``http`` one,
    in a well-ordered stack.

    Raises:
        MiddlewareOrderError: As `entered` does.
    """
    if not await entered(scope, receive, send, name):
        return False
    if scope["type"] != "http":
        await app(scope, receive, send)
        return False
    return True
