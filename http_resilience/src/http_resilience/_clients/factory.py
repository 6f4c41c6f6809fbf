"""`HttpClientFactory`: named long-lived clients, each with its own pipeline."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, Self, TypeVar

import httpx

from http_resilience._clients.named import (
    FactorySettings,
    NamedClient,
)
from http_resilience._clients.names import check_client_names
from http_resilience._clients.scope import MODULE, ModuleOnly
from http_resilience._core.clock import Clock
from http_resilience._core.events import HttpEventListener
from http_resilience._fleet.state import SharedState
from http_resilience._health.snapshot import ClientHealth, health
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import (
    HttpResilienceOptions,
)
from http_resilience._transport.stamp import (
    DEFAULT_CORRELATION_HEADER,
)

__all__ = ["DEFAULT_CLIENT", "HttpClientFactory"]

DEFAULT_CLIENT: Final = "default"
"""The name every factory knows without being told."""

_T = TypeVar("_T")


class HttpClientFactory:
    """Named httpx clients, each with its own resilience options, built once.

    Each name stands for one downstream service: its own options, or a
    `ResiliencePipeline` of its own (so one client may retry where another
    must not, and a third hedges), its own httpx arguments (base URL,
    headers, auth), its own per-host breakers. `async_client(name)` and
    `client(name)` build that client on first use and return the same one
    ever after; the factory closes them all (`aclose`, `close`).

    The factory has ``"default"`` and every name given to `add`. Its names
    are fixed when `configure` returns, or, without `configure`, when it
    hands out its first client; `add` is refused from then on. At that
    moment it refuses configuration for a client it does not have: a section
    under ``resilience.http.clients`` for any other name, and a
    ``RESILIENCE__HTTP__CLIENTS__<NAME>__...`` environment variable whose
    name is close to one of its own (a misspelling; a name far from all of
    them may be another factory's, and is left alone). The error names each
    one and the nearest name the factory has.

    Options are read, and checked, when a client is added, and so is what
    can be checked of its pipeline and transports: a mistake fails there,
    naming the client, never on the first request.

    Each client sends a correlation id in `correlation_header` on every
    attempt (hedged copies included): the id set with `correlation_id`
    around the call, else a new one per call, the same on each of its
    attempts. Given `correlation`, the id it returns comes first, so the
    calls carry the id the rest of the application uses (one line of wiring:
    ``correlation=mediator.current_correlation_id``). A header the request
    already carries is left alone. Add to a client's
    ``event_hooks["request"]`` rather than replacing the list: one of the
    hooks picks each call's id.

    Args:
        configure: Called once, here, with the factory, to `add` clients;
            the names are fixed and checked when it returns. Its return value
            is ignored.
        config: The whole configuration mapping; each client's options come
            from ``resilience.http``, its own ``resilience.http.clients.<name>``
            section and ``RESILIENCE__HTTP__...`` environment variables. Options
            given to `add` stand in for the sections, and the environment
            still applies on top of them (the operator wins); a client given a
            pipeline reads neither. A key under ``resilience`` that is no
            known section is refused here.
        clock: Every client's clock; `FakeClock` in tests.
        listeners: Called with every client's events (each names its client).
        correlation_header: The header that carries the id; None sends none.
        correlation: Called once per call, on its first attempt, for the
            call's id; a valid id it returns (1 to 200 visible ASCII
            characters) is sent, anything else (None included) falls back to
            the rule above. Any callable of no argument: this package imports
            no other's context. An exception it raises fails the call.
        shared: A `SharedState` every client of the factory shares its retry
            budget, published quota and breakers through, with the same
            client of every replica (unless `add` gives the client its own
            ``shared=``). The factory does not close it: close it after the
            factory. None: each process alone.

    Raises:
        pydantic.ValidationError: A client's configured options are invalid;
            the error's title names the client.
        ValueError: `correlation_header` is not a header name, or names one
            httpx sets itself (`Host`, `User-Agent`, `Content-Length`, ...);
            or, once the names are fixed, the configuration is for a client
            the factory does not have.
        TypeError: `correlation` is neither callable nor None, or `shared`
            is not a `SharedState`.

    Example:
        >>> import asyncio
        >>> factory = HttpClientFactory(
        ...     lambda clients: clients.add(
        ...         "inventory",
        ...         base_url="http://inventory.local",
        ...         transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        ...     )
        ... )
        >>> async def main() -> int:
        ...     async with factory:
        ...         inventory = factory.async_client("inventory")
        ...         assert inventory is factory.async_client("inventory")
        ...         return (await inventory.get("/items")).status_code
        >>> asyncio.run(main())
        200
    """

    # Only `HttpClientsModule` provides the factory to an injector: the
    # mediator reads `__provided_by__` when it compiles a handler needing one
    # (and fails at build, naming the module); injector itself meets
    # `__scope__` (see `ModuleOnly`).
    __provided_by__: ClassVar[str] = MODULE
    __scope__: ClassVar[type[ModuleOnly]] = ModuleOnly

    def __init__(
        self,
        configure: Callable[[HttpClientFactory], object] | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        listeners: Sequence[HttpEventListener] = (),
        correlation_header: str | None = DEFAULT_CORRELATION_HEADER,
        correlation: Callable[[], str | None] | None = None,
        shared: SharedState | None = None,
    ) -> None:
        self._settings = FactorySettings.checked(
            correlation_header, clock, listeners, correlation, shared
        )
        self._config = config
        self._lock = threading.Lock()
        self._clients = {
            DEFAULT_CLIENT: NamedClient.added(DEFAULT_CLIENT, None, None, {}, config)
        }
        self._added: set[str] = set()
        self._async: dict[str, httpx.AsyncClient] = {}
        self._sync: dict[str, httpx.Client] = {}
        self._fixed = False
        self._closed = False
        if configure is not None:
            configure(self)
            with self._lock:
                self._fix_names()

    @property
    def names(self) -> tuple[str, ...]:
        """Every client name the factory has, sorted."""
        return tuple(sorted(self._clients))

    def add(
        self,
        name: str,
        options: HttpResilienceOptions | None = None,
        *,
        pipeline: ResiliencePipeline | None = None,
        **httpx_kwargs: Any,
    ) -> Self:
        """Register client `name`: its options or pipeline, and its httpx arguments.

        Args:
            name: The client's name: its configuration section, and in events,
                logs and errors.
            options: Its standard pipeline's options; None (and no `pipeline`)
                reads them for `name` from the factory's configuration and the
                environment. Given, they stand in for the configuration, and
                the ``RESILIENCE__HTTP__...`` variables still apply on top.
            pipeline: A `ResiliencePipeline` to run instead of the standard
                one; the configuration's options are then not read, and a
                ``RESILIENCE__HTTP__CLIENTS__<NAME>__...`` variable for the
                client is refused (no variable reaches into a pipeline). One
                that hedges makes an async-only client.
            **httpx_kwargs: What `create_async_client` (or `create_client`)
                takes besides: ``deadline_header`` (None sends none),
                ``shared`` (a `SharedState` in place of the factory's), and what
                it passes on to httpx: ``base_url``, ``headers``, ``auth``,
                ``transport``, ``mounts``, ``verify``, ...

        Returns:
            The factory, to chain calls.

        Raises:
            ValueError: `name` is empty or already added,
                ``deadline_header`` is no header name, ``proxy`` has a
                scheme httpx does not proxy through, or a pipeline is given
                while a ``RESILIENCE__HTTP__CLIENTS__<NAME>__...`` variable
                is set for the client.
            httpx.InvalidURL: ``base_url`` or ``proxy`` does not parse (the
                message never quotes it: it may hold a password or token).
            RuntimeError: The factory's names are fixed (its `configure` has
                returned, or it has handed out a client), or it is closed.
            ResilienceLayerError: ``transport`` or a mounted transport is
                already resilient: one resilience layer per client.
            TypeError: `options` is not `HttpResilienceOptions`, `pipeline` is
                not a `ResiliencePipeline`, both are given, or the client can
                be neither async nor sync (a transport of neither kind, or a
                hedging pipeline over a sync transport).
            pydantic.ValidationError: The configured options are invalid; the
                title names the client.

        Example:
            >>> from http_resilience import ResiliencePipeline
            >>> factory = HttpClientFactory().add(
            ...     "catalog", pipeline=ResiliencePipeline().add_hedging(delay=0.2)
            ... )
            >>> factory.client("catalog")
            Traceback (most recent call last):
            ...
            TypeError: HTTP client 'catalog': its pipeline hedges, ...
        """
        if not name:
            raise ValueError(
                f"an HTTP client's name is a non-empty string, got {name!r}"
            )
        if name in self._added:
            raise ValueError(f"HTTP client {name!r} is added already")
        with self._lock:
            self._check_open()
            self._check_not_fixed(name)
        client = NamedClient.added(name, options, pipeline, httpx_kwargs, self._config)
        with self._lock:
            self._check_open()
            self._check_not_fixed(name)
            self._added.add(name)
            self._clients[name] = client
        return self

    def async_client(self, name: str = DEFAULT_CLIENT) -> httpx.AsyncClient:
        """The `httpx.AsyncClient` of `name`: built on first use, then the same one.

        The first client the factory hands out fixes its names (see the class).

        Raises:
            LookupError: The factory does not have `name`.
            RuntimeError: The factory is closed.
            TypeError: A transport given for `name` is not an async transport.
            ValueError: Fixing the names found configuration for a client the
                factory does not have.
        """
        return self._get(
            name, self._async, lambda client: client.build_async(self._settings)
        )

    def client(self, name: str = DEFAULT_CLIENT) -> httpx.Client:
        """The sync `httpx.Client` of `name`: built on first use, then the same one.

        It has breakers of its own, apart from the async client of the same
        name. The first client the factory hands out fixes its names.

        Raises:
            LookupError: The factory does not have `name`.
            RuntimeError: The factory is closed.
            TypeError: A transport given for `name` is not a sync transport, or
                its pipeline hedges (hedging needs the async client).
            ValueError: Fixing the names found configuration for a client the
                factory does not have.
        """
        return self._get(
            name, self._sync, lambda client: client.build_sync(self._settings)
        )

    def health(self) -> tuple[ClientHealth, ...]:
        """What the breakers, limiters and budgets of every client built say now.

        One `ClientHealth` per client the factory has built, by name, the
        async client before the sync one of the same name; a client not built
        yet has nothing to report. Thread-safe; sends nothing.

        Example:
            >>> factory = HttpClientFactory()
            >>> _ = factory.client()
            >>> [(each.client, each.sync) for each in factory.health()]
            [('default', True)]
        """
        built: list[httpx.AsyncClient | httpx.Client] = []
        with self._lock:
            for name in sorted(self._clients):
                if name in self._async:
                    built.append(self._async[name])
                if name in self._sync:
                    built.append(self._sync[name])
        return tuple(health(client) for client in built)

    async def aclose(self) -> None:
        """Close every client the factory built, async and sync; idempotent.

        A closed factory builds no more clients.
        """
        with self._lock:
            self._closed = True
            built_async, self._async = list(self._async.values()), {}
            built_sync, self._sync = list(self._sync.values()), {}
        for client in built_sync:
            client.close()
        for async_client in built_async:
            await async_client.aclose()

    def close(self) -> None:
        """Close every sync client the factory built; idempotent.

        Raises:
            RuntimeError: The factory built async clients: they need `aclose`.
                Nothing is closed then.
        """
        with self._lock:
            if self._async:
                names = ", ".join(repr(name) for name in sorted(self._async))
                raise RuntimeError(
                    f"HTTP clients {names} are async: close the factory with aclose()"
                )
            self._closed = True
            built, self._sync = list(self._sync.values()), {}
        for client in built:
            client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HttpClientFactory(names={list(self.names)!r})"

    # --- building ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the HTTP client factory is closed")

    def _check_not_fixed(self, name: str) -> None:
        if self._fixed:
            raise RuntimeError(
                f"HTTP client {name!r}: the factory's clients are fixed once it "
                "has handed out a client (or its configure has returned); add "
                "every client before"
            )

    def _fix_names(self) -> None:
        """Fix the names; refuse configuration for any other client. Under the lock."""
        check_client_names(self._clients.keys(), self._config, os.environ)
        self._fixed = True

    def _get(
        self, name: str, built: dict[str, _T], build: Callable[[NamedClient], _T]
    ) -> _T:
        found = built.get(name)
        if found is not None:
            return found
        with self._lock:
            self._check_open()
            if not self._fixed:
                self._fix_names()
            found = built.get(name)
            if found is None:
                client = self._clients.get(name)
                if client is None:
                    known = ", ".join(repr(known) for known in self.names)
                    raise LookupError(
                        f"no HTTP client named {name!r}; the factory knows {known}"
                    )
                found = build(client)
                built[name] = found
            return found
