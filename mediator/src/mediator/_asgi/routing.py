"""Whether the Starlette router a middleware wraps has a route for a request.

A middleware that refuses requests (`IdempotencyKeyMiddleware`'s 400 for a
missing key) must not answer for a path the app does not serve: the app says
404, or 405 for a method the path does not take. Starlette (and FastAPI)
routes answer that question themselves: ``route.matches(scope)`` says
``FULL``, ``PARTIAL`` (the path, not the method) or ``NONE``, the test the
router makes before it calls a route. The router is found by following each
middleware's ``app`` attribute inward, as Starlette's own middlewares and
this package's keep it, and known by its ``routes`` and ``url_path_for``;
nothing here imports Starlette. Asked of its routes alone, the router decides
as it will when the request reaches it, provided no middleware between
rewrites the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, cast, runtime_checkable

from mediator._asgi.types import Scope

__all__ = ["Router", "router_inside", "routes_request"]

_MAX_HOPS: Final = 64
"""Middlewares followed inward before the search gives up."""
_MAX_DEPTH: Final = 8
"""Mounts followed into before a match is taken as routed."""


@runtime_checkable
class Router(Protocol):
    """What is read of a Starlette ``Router`` (or ``Starlette`` app)."""

    @property
    def routes(self) -> Sequence[object]:
        """The routes, in the order the router tries them."""
        ...

    def url_path_for(self, name: str, /, **path_params: object) -> object:
        """Starlette's reverse lookup: read only to know a router."""
        ...


def router_inside(app: object) -> Router | None:
    """The router `app` ends in, through the middlewares' ``app``; None if none."""
    seen: set[int] = set()
    current: object = app
    for _ in range(_MAX_HOPS):
        if current is None or id(current) in seen:
            return None
        seen.add(id(current))
        if isinstance(current, Router) and isinstance(
            getattr(current, "routes", None), Sequence
        ):
            return current
        current = getattr(current, "app", None)
    return None


def routes_request(router: Router, scope: Scope) -> bool:
    """Whether a route of `router` takes the request whole (path and method).

    False when none does: the router answers 404, or 405 when a route takes
    the path with other methods. A route whose answer cannot be told (it
    raises, or answers something other than a Starlette ``Match``) counts as
    taking it, so the middleware checks the request as it would without a
    router.
    """
    return _taken(router.routes, scope, 0)


def _taken(routes: Sequence[object], scope: Scope, depth: int) -> bool:
    for route in routes:
        matches = getattr(route, "matches", None)
        if not callable(matches):
            return True
        try:
            match, child = cast("tuple[object, Scope]", matches(scope))
        except Exception:
            return True
        name = getattr(match, "name", None)
        if name == "FULL":
            # A mount (or a host) takes the path; its own routes decide.
            inner = getattr(route, "routes", None)
            if not isinstance(inner, Sequence) or depth >= _MAX_DEPTH:
                return True
            mounted = cast("Sequence[object]", inner)
            return not mounted or _taken(mounted, {**scope, **child}, depth + 1)
        if name not in ("NONE", "PARTIAL"):
            return True
    return False
