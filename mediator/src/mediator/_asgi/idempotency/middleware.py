"""`IdempotencyKeyMiddleware`: the ``Idempotency-Key`` of POST and PATCH requests.

One concept: the middleware's flow, from the request's key to the kept answer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import cast

from mediator._asgi.idempotency.capture import Capture, replay_kept, replaying
from mediator._asgi.idempotency.keys import (
    MALFORMED,
    Malformed,
    fingerprint,
    parsed_key,
    principal_of,
)
from mediator._asgi.idempotency.settings import (
    ALWAYS_KEPT,
    DEFAULT_IDEMPOTENCY_HEADER,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_METHODS,
    Required,
    checked_limit,
    checked_methods,
    checked_replay_headers,
    checked_required,
    checked_scope,
    checked_times,
)
from mediator._asgi.problem import (
    Problem,
    check_app,
    check_callable,
    check_challenge,
    check_header_name,
    send_problem,
)
from mediator._asgi.routing import router_inside, routes_request
from mediator._asgi.stack import entered
from mediator._asgi.types import ASGIApp, Receive, Scope, Send
from mediator._behaviors.idempotency.behavior import (
    DEFAULT_LEASE,
    DEFAULT_RETENTION,
    DEFAULT_SCOPE,
)
from mediator._behaviors.idempotency.marker import ScopeMode, idempotency_key, scope_of
from mediator._behaviors.idempotency.store import (
    MAX_KEY_LENGTH,
    AsyncIdempotencyStore,
    StoredOutcome,
)
from mediator._core.clock import utc_now
from mediator._core.context import Principal
from mediator._core.errors import ConfigurationError, TransientDatabaseError

__all__ = ["IdempotencyKeyMiddleware"]

_logger = logging.getLogger("mediator.asgi")


class IdempotencyKeyMiddleware:
    """Reads the ``Idempotency-Key`` of POST and PATCH requests, and replays.

    For an ``http`` request whose method is in `methods`:

    - no key: 400 when `required` says the route needs one, else the request
      goes through as it came;
    - a malformed key (empty, over 255 characters, anything but visible
      ASCII, or the header sent more than once): 400, and nothing is stored.
      The value may be sent plain (``order-7``) or as the IETF draft's quoted
      string (``"order-7"``), which is the same key;
    - a valid key: the app runs inside `idempotency_key` (``@idempotent``
      commands read it), and, given a `store_factory`, the answer is kept:

      - no principal, on a route `anonymous` does not name: 401 (with
        ``WWW-Authenticate: <www_authenticate>`` when given), the app does not
        run and nothing is stored: kept under no one, the answer would be
        every anonymous caller's;
      - the first request with the key claims it and runs the app; its answer
        (status, body, and the headers ``content-type``, ``content-encoding``,
        ``location`` and those named in `replay_headers`; never
        ``set-cookie``) is stored when its status is 200 to 499, except 408,
        409, 425 and 429, which say to try again, and 404 and 405 (no such
        route: nothing is kept for it). It is stored before the answer's
        last body chunk is passed on, so a duplicate sent the moment the
        answer arrives is replayed;
      - a later request with the key and the same body (and query string)
        gets that answer back without running the app, marked with
        ``Idempotent-Replayed: true``;
      - the key while its first request still runs: 409, with
        ``Retry-After: 1``; the key with another body: 422;
      - the store refusing the claim for now (`TransientDatabaseError`: SQLite
        locked past its busy timeout, a serialization failure; or any other
        error of the store): 503, with ``Retry-After: 1``; the store refusing
        the values (a `ValueError`, a driver's ``DataError``): 400; the store
        set up wrong (a `ConfigurationError`: its table is missing): 500, and
        the log line says how to create it. The app does not run, and the
        failure is logged (its type, never the key);
      - an answer that is not kept (5xx, one of the four above, a body over
        `max_response_bytes`) or an exception gives the key back (``release``),
        so that a retry runs the app again. A store failing to keep or give
        back the answer is logged; the caller still gets the answer.

    The key is scoped by caller and route, in the encoding
    `IdempotencyBehavior` uses too: with `scope` ``"principal"`` the
    principal's id and its ``claims["tenant"]``, with ``"tenant"`` the tenant
    (a principal without one stays its own scope, apart from any tenant), or
    the anonymous marker; then the method and the path. It is stored as a
    digest (``"s1:"`` and 64 hex digits), so no path or tenant can forge
    another's scope nor pass a database's limits. Put this middleware inside
    `RequestContextMiddleware` (so the principal is known) and outside
    `DomainErrorMiddleware` (so a domain error's answer is kept too).

    Problems are answered as RFC 9457 ``application/problem+json``, never
    quoting the key. Scopes other than ``http`` and other methods pass
    through untouched.

    A request no route of the app takes passes through untouched too, for
    the app to answer its 404 (or 405, the path taken with other methods):
    no key is checked or stored for it. That is known when the app inside is
    Starlette's or FastAPI's (added with ``app.add_middleware``, or wrapping
    the app): the middleware finds its router through the ``app`` attribute
    each middleware between keeps, and asks its routes (``route.matches``,
    into mounts) as the router will. For any other app, or one behind a
    middleware that keeps no ``app``, every request is checked as above
    (so a missing key on a path `required` covers is a 400 even where the
    app would say 404), and a 404 or 405 is still never stored.

    Args:
        app: The ASGI application to wrap.
        store_factory: Called once per keyed request for the store that keeps
            the answers, such as
            ``lambda: AsyncSqlAlchemyIdempotencyStore(engine)``. None (the
            default): the key is only checked and set for the app.
        required: Which requests must carry a key: a callable taking the ASGI
            scope and returning a bool, or a collection of path prefixes
            (``"/orders"`` covers ``/orders`` and ``/orders/7``, not
            ``/orders-archive``). Default: none.
        methods: The methods whose key is read; default POST and PATCH.
        header: The header the key is read from; default ``Idempotency-Key``.
        replay_headers: Names of more answer headers to keep and replay (an
            ``ETag``, say). ``Set-Cookie`` and ``Content-Length`` are refused.
        max_body_bytes: The largest request body taken with a key (it is read
            whole, hashed, then handed to the app); larger: 413. Default 1 MiB.
        max_response_bytes: The largest answer body kept; default 1 MiB.
        lease: How long a claim holds the key; a request still running after
            it may see its key taken over. Default one minute.
        retention: How long a kept answer is replayed; default 24 hours.
        now: The current time, timezone-aware UTC; the system's by default.
        scope: Whose answer a key is: ``"principal"`` (the default), each
            principal's own; ``"tenant"``, shared by the users of a tenant.
        anonymous: Which requests may store answers with no principal, the
            anonymous callers then sharing one scope: the same forms as
            `required`. Default: none (a 401).
        www_authenticate: The challenge sent in ``WWW-Authenticate`` with
            that 401, such as ``'Bearer realm="shop"'``; None (the default)
            sends none.

    Raises:
        TypeError: An argument has the wrong type (`app`, `store_factory`,
            `now`, `www_authenticate`, or a `required` or `anonymous` that is
            not callable nor a collection of strings; a single string where a
            collection is expected).
        ValueError: A method or header name is not an HTTP token, `methods`
            is empty, a prefix does not start with ``/``, a limit is not
            positive, `lease` is not positive or `retention` is shorter
            than `lease`, `replay_headers` names a refused header, `scope`
            is neither ``"principal"`` nor ``"tenant"``, or
            `www_authenticate` is empty or holds a line break.

    Example:
        >>> import asyncio, httpx
        >>> from mediator import current_idempotency_key
        >>> async def app(scope, receive, send):
        ...     body = f"key {current_idempotency_key()}".encode()
        ...     await send({"type": "http.response.start", "status": 201})
        ...     await send({"type": "http.response.body", "body": body})
        >>> wrapped = IdempotencyKeyMiddleware(app, required=["/orders"])
        >>> async def main():
        ...     transport = httpx.ASGITransport(app=wrapped)
        ...     async with httpx.AsyncClient(transport=transport) as client:
        ...         keyed = await client.post(
        ...             "http://shop/orders", headers={"Idempotency-Key": "o-7"}
        ...         )
        ...         missing = await client.post("http://shop/orders")
        ...     return keyed.text, missing.status_code
        >>> asyncio.run(main())
        ('key o-7', 400)
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        store_factory: Callable[[], AsyncIdempotencyStore] | None = None,
        required: Required = (),
        methods: Collection[str] = DEFAULT_METHODS,
        header: str = DEFAULT_IDEMPOTENCY_HEADER,
        replay_headers: Collection[str] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        lease: timedelta = DEFAULT_LEASE,
        retention: timedelta = DEFAULT_RETENTION,
        now: Callable[[], datetime] = utc_now,
        scope: ScopeMode = DEFAULT_SCOPE,
        anonymous: Required = (),
        www_authenticate: str | None = None,
    ) -> None:
        check_app(app)
        if store_factory is not None:
            check_callable(
                store_factory,
                "store_factory must be a callable that returns an "
                "AsyncIdempotencyStore",
            )
        check_callable(now, "now must be a callable returning a datetime")
        self.app = app
        self.store_factory = store_factory
        self.required = required
        self.methods = methods
        self.header = header
        self.replay_headers = replay_headers
        self.max_body_bytes = checked_limit(max_body_bytes, "max_body_bytes")
        self.max_response_bytes = checked_limit(
            max_response_bytes, "max_response_bytes"
        )
        self.lease, self.retention = checked_times(lease, retention)
        self.now = now
        self.scope: ScopeMode = checked_scope(scope)
        self.anonymous = anonymous
        self.www_authenticate = check_challenge(www_authenticate)
        self._required = checked_required(required, "required")
        self._anonymous = checked_required(anonymous, "anonymous")
        self._methods = checked_methods(methods)
        self._header = check_header_name(header, "header")
        self._kept = ALWAYS_KEPT | checked_replay_headers(replay_headers)
        self._router = router_inside(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request's key; run the app with it, or replay its answer."""
        if not await entered(scope, receive, send, "IdempotencyKeyMiddleware"):
            return
        if scope["type"] != "http" or scope["method"] not in self._methods:
            await self.app(scope, receive, send)
            return
        router = self._router
        if router is not None and not routes_request(router, scope):
            # No route takes it: the app's 404 or 405, not a key's 400.
            await self.app(scope, receive, send)
            return
        key = self._key_of(scope)
        if isinstance(key, Malformed):
            await _send_problem(
                send,
                400,
                f"The {self.header} header must be sent once, with 1 to "
                f"{MAX_KEY_LENGTH} visible ASCII characters.",
            )
            return
        if key is None:
            if self._required(scope):
                await _send_problem(
                    send,
                    400,
                    f"This request needs an {self.header} header.",
                )
                return
            await self.app(scope, receive, send)
            return
        if self.store_factory is None:
            with idempotency_key(key):
                await self.app(scope, receive, send)
            return
        principal = principal_of(scope)
        if principal is None and not self._anonymous(scope):
            # Stored under no one, the answer would be every anonymous caller's.
            challenge = self.www_authenticate
            await send_problem(
                send,
                Problem(
                    401,
                    f"A request with an {self.header} needs an authenticated caller.",
                    headers=()
                    if challenge is None
                    else ((b"www-authenticate", challenge.encode("ascii")),),
                ),
            )
            return
        await self._kept_answer(
            self.store_factory, key, principal, scope, receive, send
        )

    def _key_of(self, scope: Scope) -> str | Malformed | None:
        """The request's key; None when it sent none."""
        found = [
            bytes(value)
            for name, value in scope.get("headers", ())
            if bytes(name).lower() == self._header
        ]
        if not found:
            return None
        if len(found) > 1:
            return MALFORMED
        return parsed_key(found[0])

    async def _kept_answer(
        self,
        store_factory: Callable[[], AsyncIdempotencyStore],
        key: str,
        principal: Principal | None,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Claim the key, then replay its answer or run the app and keep it."""
        body = await self._body(scope, receive, send)
        if body is None:
            return
        # Checked whatever the annotations say: the factory is the user's.
        store = cast("object", store_factory())
        if not isinstance(store, AsyncIdempotencyStore):
            raise TypeError(
                "store_factory must return an AsyncIdempotencyStore, got "
                f"{type(store).__name__}"
            )
        method = scope["method"]
        name = scope_of(
            principal,
            (("http", method), ("path", str(scope["path"]))),
            mode=self.scope,
        )
        try:
            claim = await store.claim(
                name,
                key,
                fingerprint(scope, body),
                now=self.now(),
                lease=self.lease,
                retention=self.retention,
            )
        except TransientDatabaseError:
            # Outside DomainErrorMiddleware, so answered here as it would be
            # there: SQLite locked past its busy timeout (a duplicate waiting
            # behind a first request's open transaction), a serialization failure.
            await self._unavailable(send)
            return
        except Exception as error:
            _log_store_failure("check the idempotency key of %s %s", scope, error)
            if _bad_input(error):
                await _send_problem(
                    send,
                    400,
                    f"This request cannot be kept with an {self.header}.",
                )
            elif isinstance(error, ConfigurationError):
                # The service is set up wrong (its table is missing): not an
                # outage a caller should retry, and logged with the fix.
                await _send_problem(
                    send,
                    500,
                    f"This service cannot keep requests with an {self.header}.",
                )
            else:
                await self._unavailable(send)
            return
        if claim.status == "replay" and claim.outcome is not None:
            await replay_kept(send, claim.outcome)
            return
        if claim.status == "in_flight":
            await _send_problem(
                send,
                409,
                f"A request with this {self.header} is still being processed. "
                "Try again later.",
                retry_after=True,
            )
            return
        if claim.status == "mismatch":
            await _send_problem(
                send,
                422,
                f"This {self.header} was used with another request.",
            )
            return
        token = claim.token
        if claim.status != "claimed" or token is None:
            raise RuntimeError(
                f"the idempotency store answered a claim with {claim!r}, which "
                "breaks its contract"
            )

        async def settle(outcome: StoredOutcome | None) -> None:
            try:
                if outcome is None:
                    await store.release(name, key, token)
                else:
                    await store.finish(name, key, token, outcome, now=self.now())
            except Exception as error:
                # The caller gets its answer; the claim stays pending until its
                # lease ends, and a retry then runs the app again.
                _log_store_failure(
                    "record the answer to %s %s with its idempotency key", scope, error
                )

        capture = Capture(send, self.max_response_bytes, self._kept, settle)
        try:
            with idempotency_key(key):
                await self.app(scope, replaying(body, receive), capture.send)
        except BaseException:
            if not capture.settled:
                # The key goes back for a retry; the lease expiring would free
                # it too, so a failing store must not hide the app's error.
                with contextlib.suppress(Exception):
                    await store.release(name, key, token)
            raise
        if not capture.settled:
            await settle(None)  # the app never finished its answer

    async def _unavailable(self, send: Send) -> None:
        await _send_problem(
            send,
            503,
            f"This {self.header} could not be checked for now. Try again later.",
            retry_after=True,
        )

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole request body; None when the caller left or it was too big."""
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if bytes(name).lower() == b"content-length":
                declared = bytes(value).strip()
                if declared.isdigit() and int(declared) > limit:
                    await self._too_large(send)
                    return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                await self._too_large(send)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        await _send_problem(
            send,
            413,
            f"A request with an {self.header} takes a body of at most "
            f"{self.max_body_bytes} bytes.",
        )


async def _send_problem(
    send: Send, status: int, detail: str, *, retry_after: bool = False
) -> None:
    """Answer with an RFC 9457 problem, with ``Retry-After: 1`` when asked."""
    headers = ((b"retry-after", b"1"),) if retry_after else ()
    await send_problem(send, Problem(status, detail, headers=headers))


def _bad_input(error: Exception) -> bool:
    """Whether the store refused the values themselves, not the moment.

    A `ValueError`, or a DB-API ``DataError`` (PEP 249 names it so in every
    driver; matched by name, since this package imports no driver).
    """
    return isinstance(error, ValueError) or any(
        kind.__name__ == "DataError" for kind in type(error).__mro__
    )


def _log_store_failure(what: str, scope: Scope, error: Exception) -> None:
    # The error's type only: a driver's message, and SQLAlchemy's parameter
    # list, would quote the key. A configuration error is ours (a missing
    # table, named) and quotes no key: its message says what to do.
    detail = type(error).__qualname__
    if isinstance(error, ConfigurationError):
        detail += f": {error}"
    _logger.error(
        f"could not {what} (the store raised %s)",
        scope["method"],
        scope["path"],
        detail,
    )
