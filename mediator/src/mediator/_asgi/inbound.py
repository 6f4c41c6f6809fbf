"""What the request-context middlewares decide from a request, whatever its server.

`mediator.asgi.RequestContextMiddleware` and `mediator.wsgi`'s twin read a
request differently (an ASGI scope's header pairs, a WSGI environ's joined
values) and decide the same way, here: which correlation id a caller's header
gives, whether `trusted` believes the caller, and whether the principal
callable returned a principal.
"""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

from mediator._asgi.problem import check_app, check_callable, check_header_name
from mediator._core.context import Principal, is_correlation_id

__all__ = [
    "DEFAULT_CORRELATION_HEADER",
    "RequestContextOptions",
    "checked_principal",
    "checked_trusted",
    "correlation_from",
    "is_async",
    "trusts",
]

App = TypeVar("App")
Of = TypeVar("Of")
Where = TypeVar("Where")

DEFAULT_CORRELATION_HEADER: Final = "X-Correlation-ID"


class RequestContextOptions(Generic[App, Of, Where]):
    """The options of both `RequestContextMiddleware`s, checked, and their id rule.

    `App` is the wrapped application, `Of` the principal callable and `Where`
    what the callables are given (an ASGI scope, a WSGI environ). A subclass
    names them (`_application`, `_where`), says why a server refuses an
    ``async def`` principal (`_sync_only`, None when it awaits one), and reads
    the caller's id in its own interface (`_inbound`).
    """

    _application: ClassVar[str]
    _where: ClassVar[str]
    _sync_only: ClassVar[str | None] = None

    def __init__(
        self,
        app: App,
        *,
        principal: Of | None = None,
        correlation_header: str = DEFAULT_CORRELATION_HEADER,
        trusted: Callable[[Where], bool] | None = None,
    ) -> None:
        check_app(app, self._application)
        awaits = False
        if principal is not None:
            check_callable(
                principal,
                f"principal must be a callable that takes {self._where} and "
                "returns a Principal or None",
            )
            awaits = is_async(principal)
            if awaits and self._sync_only is not None:
                raise TypeError(
                    f"principal must be a plain function, not async def: "
                    f"{self._sync_only}"
                )
        self.app = app
        self.principal = principal
        self.correlation_header = correlation_header
        self.trusted: Callable[[Where], bool] | None = checked_trusted(
            trusted, self._where
        )
        self._header = check_header_name(correlation_header, "correlation_header")
        self._awaits = awaits

    def _chosen(self, request: Where) -> str:
        """The request's correlation id: a trusted caller's valid one, else new."""
        chosen = self._inbound(request) if trusts(self.trusted, request) else None
        return str(uuid.uuid4()) if chosen is None else chosen

    def _inbound(self, request: Where) -> str | None:
        """The caller's id, when it sent exactly one valid one."""
        raise NotImplementedError


def correlation_from(values: Sequence[bytes]) -> str | None:
    """The caller's id, from the values of every line of its header; else None.

    Taken only when the header came once with a valid id (the rule of
    `mediator.correlation_id`): a header sent twice, or one with a comma in it
    (two lines a hop joined), names no one id.
    """
    if len(values) != 1:
        return None
    # Outer spaces and tabs are no part of a field value (RFC 9110, 5.5);
    # servers strip them, a raw scope may not have.
    text = values[0].strip(b" \t").decode("ascii", errors="replace")
    return text if is_correlation_id(text) else None


def checked_trusted(trusted: object, where: str) -> Callable[[Any], bool] | None:
    """`trusted` if it is None or a plain callable; refused at once otherwise.

    `where` names what it is called with, such as ``"the ASGI scope"``.

    Raises:
        TypeError: `trusted` is not callable, or is ``async``.
    """
    if trusted is None:
        return None
    check_callable(
        trusted,
        f"trusted must be a callable that takes {where} and returns True or "
        "False, or None",
    )
    if is_async(trusted):
        raise TypeError(
            "trusted must be a plain function, not async def: it decides from "
            f"{where} alone"
        )
    return cast("Callable[[Any], bool]", trusted)


def trusts(trusted: Callable[[Any], bool] | None, request: object) -> bool:
    """What `trusted` says of `request`; True when there is no `trusted`.

    Raises:
        TypeError: `trusted` returned something other than True or False.
    """
    if trusted is None:
        return True
    # Checked whatever the annotations say: a truthy string or a coroutine
    # must not pass for True.
    verdict = cast("object", trusted(request))
    if isinstance(verdict, bool):
        return verdict
    if inspect.iscoroutine(verdict):
        verdict.close()
    raise TypeError(f"trusted must return True or False, got {type(verdict).__name__}")


def checked_principal(found: object) -> Principal | None:
    """`found` if the principal callable returned a `Principal` or None.

    Raises:
        TypeError: It returned anything else.
    """
    if found is None or isinstance(found, Principal):
        return found
    raise TypeError(
        "the principal callable must return a Principal or None, got "
        f"{type(found).__name__}"
    )


def is_async(call: object) -> bool:
    """True when calling `call` returns a coroutine (told once, at construction)."""
    while isinstance(call, functools.partial):
        call = cast("functools.partial[object]", call).func
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        type(call).__call__  # an object whose __call__ is async def
    )
