"""One order for the web middlewares of `mediator.asgi` and `http_resilience`.

Each of those middlewares records its name in the ``http`` scope as it is
entered, and refuses the request when a middleware that belongs inside it was
entered before it. The ``lifespan`` scope goes through the same stack when
the server starts, so a misordered stack is refused there too, before the
first request: the middleware answers the startup as failed. The packages
may not import each other, so each keeps a copy of this module (its table,
its message, its scope key) and raises its own error with the message
`misplaced` returns.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Final

__all__ = ["CANONICAL_ORDER", "STACK_SCOPE_KEY", "misplaced", "order_message"]

Scope = MutableMapping[str, Any]

STACK_SCOPE_KEY: Final = "resilience.middleware_stack"
"""The scope entry listing the web middlewares entered so far, outermost first."""

CANONICAL_ORDER: Final = (
    "RequestContextMiddleware",
    "ResilienceContextMiddleware",
    "IdempotencyKeyMiddleware",
    "DomainErrorMiddleware",
    "ResilienceErrorMiddleware",
)
"""The web middlewares of `mediator.asgi` and `http_resilience`, outermost first."""

# Outer middlewares rank lower. The two error mappers share a rank: each
# answers only its own errors and re-raises the other's, so either may be
# the outer one.
_RANK: Final = {
    "RequestContextMiddleware": 0,
    "ResilienceContextMiddleware": 1,
    "IdempotencyKeyMiddleware": 2,
    "DomainErrorMiddleware": 3,
    "ResilienceErrorMiddleware": 3,
}


def order_message(outer: str, inner: str) -> str:
    """The message of a stack where `outer` runs outside `inner`, wrongly."""
    added = ", ".join(f"app.add_middleware({name})" for name in CANONICAL_ORDER[::-1])
    return (
        f"{outer} runs outside {inner}, but belongs inside it. The web "
        "middlewares go in this order, outermost first: "
        f"{', '.join(CANONICAL_ORDER[:-2])}, then {CANONICAL_ORDER[-2]} and "
        f"{CANONICAL_ORDER[-1]} (these two in either order); leave out those "
        "you do not use. Starlette's and FastAPI's add_middleware make the "
        "middleware added last the outermost, so add them innermost first: "
        f"{added}, each with its options."
    )


def misplaced(scope: Scope, name: str) -> str | None:
    """Record that middleware `name` is entered; say why not when out of order.

    Scopes other than ``http`` and ``lifespan`` are left alone. A middleware
    entered again after the same one (a mounted sub-application with its own
    middlewares) starts a new stack: it is checked against the middlewares
    entered since, not before.

    Returns:
        None when `name` is in its place (it is recorded); else the message
        of the refusal, naming the outermost middleware of the stack that
        belongs inside `name`, the order, and how to write it.
    """
    if scope.get("type") not in ("http", "lifespan"):
        return None
    entered: list[str] | None = scope.get(STACK_SCOPE_KEY)
    if entered is None:
        scope[STACK_SCOPE_KEY] = [name]
        return None
    # In a stack in order, each middleware ranks at least as high as the one
    # entered just before it: one comparison per middleware keeps it so.
    rank = _RANK[name]
    if entered and _RANK.get(entered[-1], rank) > rank:
        outer = _outer_in_stack(entered, name, rank)
        if outer is not None:
            return order_message(outer, name)
    entered.append(name)
    return None


def _outer_in_stack(entered: list[str], name: str, rank: int) -> str | None:
    """The first middleware of the current stack that belongs inside `name`.

    None when `name` is already in the current stack: it starts a new one.
    """
    stack: list[str] = []
    for seen in entered:
        if seen in stack:
            stack = []
        stack.append(seen)
    if name in stack:
        return None
    return next(seen for seen in stack if _RANK.get(seen, rank) > rank)
