"""`HttpClientFactory`: named, long-lived clients, each with its own options."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar, cast

import httpx

from http_resilience._client import (
    _TRANSPORT_ARGUMENTS,  # pyright: ignore[reportPrivateUsage]
    create_async_client,
    create_client,
)
from http_resilience._clock import Clock
from http_resilience._correlation import (
    DEFAULT_CORRELATION_HEADER,
    AsyncCorrelationStamp,
    CorrelationStamp,
    assign_correlation_id,
    assign_correlation_id_async,
    check_header_name,
)
from http_resilience._events import HttpEventListener
from http_resilience._options import HttpResilienceOptions
from http_resilience._transport import refuse_second_layer

__all__ = ["DEFAULT_CLIENT", "HttpClientFactory"]

DEFAULT_CLIENT: Final = "default"
"""The name every factory knows without being told."""

_T = TypeVar("_T")


class HttpClientFactory:
    """Named httpx clients, each with its own resilience options, built once.

    Each name stands for one downstream service: its own options (so one
    client may retry where another must not), its own httpx arguments (base
    URL, headers, auth), its own per-host breakers. `async_client(name)` and
    `client(name)` build that client on first use and return the same one ever
    after; the factory closes them all (`aclose`, `close`).

    The factory knows ``"default"``, every client with a section under
    ``resilience.http.clients`` in `config`, and every name given to `add`.
    Options are read, and checked, when a name becomes known: a mistake fails
    here, naming the client, never on the first request.

    Each client sends a correlation id in `correlation_header` on every
    attempt: the id set with `correlation_id` around the call, else a new one
    per call, the same on each of its retries. A header the request already
    carries is left alone. Add to a client's ``event_hooks["request"]`` rather
    than replacing the list: one of the hooks picks each call's id.

    Args:
        config: The whole configuration mapping; each client's options come
            from ``resilience.http``, its own ``resilience.http.clients.<name>``
            section and ``RESILIENCE__HTTP__...`` environment variables, unless
            `add` gives them.
        clock: Every client's clock; `FakeClock` in tests.
        listeners: Called with every client's events (each names its client).
        correlation_header: The header that carries the id; None sends none.

    Raises:
        pydantic.ValidationError: A configured client's options are invalid;
            the error's title names the client.
        ValueError: `correlation_header` is not a header name, or names one
            httpx sets itself (`Host`, `User-Agent`, `Content-Length`, ...).

    Example:
        >>> import asyncio
        >>> factory = HttpClientFactory().add(
        ...     "inventory",
        ...     base_url="http://inventory.local",
        ...     transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        ... )
        >>> async def main() -> int:
        ...     async with factory:
        ...         inventory = factory.async_client("inventory")
        ...         assert inventory is factory.async_client("inventory")
        ...         return (await inventory.get("/items")).status_code
        >>> asyncio.run(main())
        200
    """

    def __init__(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        listeners: Sequence[HttpEventListener] = (),
        correlation_header: str | None = DEFAULT_CORRELATION_HEADER,
    ) -> None:
        self._config = config
        self._clock = clock
        self._listeners = tuple(listeners)
        self._header = (
            None
            if correlation_header is None
            else check_header_name(correlation_header)
        )
        self._lock = threading.Lock()
        self._options: dict[str, HttpResilienceOptions] = {}
        self._arguments: dict[str, dict[str, Any]] = {}
        self._added: set[str] = set()
        self._async: dict[str, httpx.AsyncClient] = {}
        self._sync: dict[str, httpx.Client] = {}
        self._closed = False
        for name in (DEFAULT_CLIENT, *_configured_names(config)):
            self._options[name] = self._read(name)
            self._arguments[name] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """Every client name the factory knows, sorted."""
        return tuple(sorted(self._options))

    def add(
        self,
        name: str,
        options: HttpResilienceOptions | None = None,
        **httpx_kwargs: Any,
    ) -> Self:
        """Register client `name`: its options and its httpx arguments.

        Args:
            name: The client's name: its configuration section, and in events,
                logs and errors.
            options: Its options; None reads them for `name` from the factory's
                configuration and the environment.
            **httpx_kwargs: What `create_async_client` (or `create_client`)
                passes on to httpx: ``base_url``, ``headers``, ``auth``,
                ``transport``, ``mounts``, ``verify``, ...

        Returns:
            The factory, to chain calls.

        Raises:
            ValueError: `name` is empty or already added.
            RuntimeError: A client of that name was built already, or the
                factory is closed.
            ResilienceLayerError: ``transport`` or a mounted transport is
                already resilient: one resilience layer per client.
            TypeError: `options` is not `HttpResilienceOptions`.
            pydantic.ValidationError: The configured options are invalid; the
                title names the client.
        """
        if not name:
            raise ValueError(
                f"an HTTP client's name is a non-empty string, got {name!r}"
            )
        if name in self._added:
            raise ValueError(f"HTTP client {name!r} is added already")
        if options is None:
            options = self._read(name)
        elif not isinstance(options, HttpResilienceOptions):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"HTTP client {name!r}: options must be HttpResilienceOptions or "
                f"None, got {type(options).__qualname__}"
            )
        refuse_second_layer(httpx_kwargs.get("transport"), name)
        mounts = cast("Mapping[str, object]", httpx_kwargs.get("mounts") or {})
        for mounted in mounts.values():
            refuse_second_layer(mounted, name)
        with self._lock:
            self._check_open()
            if name in self._async or name in self._sync:
                raise RuntimeError(
                    f"HTTP client {name!r} is in use already; add it before asking "
                    "for it"
                )
            self._added.add(name)
            self._options[name] = options
            self._arguments[name] = dict(httpx_kwargs)
        return self

    def async_client(self, name: str = DEFAULT_CLIENT) -> httpx.AsyncClient:
        """The `httpx.AsyncClient` of `name`: built on first use, then the same one.

        Raises:
            LookupError: The factory does not know `name`.
            RuntimeError: The factory is closed.
            TypeError: A transport given for `name` is not an async transport.
        """
        return self._get(name, self._async, self._build_async)

    def client(self, name: str = DEFAULT_CLIENT) -> httpx.Client:
        """The sync `httpx.Client` of `name`: built on first use, then the same one.

        It has breakers of its own, apart from the async client of the same
        name.

        Raises:
            LookupError: The factory does not know `name`.
            RuntimeError: The factory is closed.
            TypeError: A transport given for `name` is not a sync transport.
        """
        return self._get(name, self._sync, self._build_sync)

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HttpClientFactory(names={list(self.names)!r})"

    # --- building ---------------------------------------------------------------

    def _read(self, name: str) -> HttpResilienceOptions:
        # from_config names the client in every error it raises.
        return HttpResilienceOptions.from_config(self._config, client=name)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the HTTP client factory is closed")

    def _get(
        self,
        name: str,
        built: dict[str, _T],
        build: Callable[[str, dict[str, Any]], _T],
    ) -> _T:
        found = built.get(name)
        if found is not None:
            return found
        with self._lock:
            self._check_open()
            found = built.get(name)
            if found is None:
                if name not in self._options:
                    known = ", ".join(repr(known) for known in self.names)
                    raise LookupError(
                        f"no HTTP client named {name!r}; the factory knows {known}"
                    )
                found = build(name, dict(self._arguments[name]))
                built[name] = found
            return found

    def _build_async(self, name: str, arguments: dict[str, Any]) -> httpx.AsyncClient:
        header = self._header
        if header is not None:

            def stamped(inner: object) -> AsyncCorrelationStamp:
                if not isinstance(inner, httpx.AsyncBaseTransport):
                    raise TypeError(
                        f"HTTP client {name!r}: an async client needs async "
                        f"transports, got {type(inner).__qualname__}"
                    )
                return AsyncCorrelationStamp(inner, header)

            _stamp_transports(arguments, stamped, httpx.AsyncHTTPTransport)
            _add_hook(arguments, assign_correlation_id_async)
        return create_async_client(
            name,
            self._options[name],
            clock=self._clock,
            listeners=self._listeners,
            **arguments,
        )

    def _build_sync(self, name: str, arguments: dict[str, Any]) -> httpx.Client:
        header = self._header
        if header is not None:

            def stamped(inner: object) -> CorrelationStamp:
                if not isinstance(inner, httpx.BaseTransport):
                    raise TypeError(
                        f"HTTP client {name!r}: a sync client needs sync "
                        f"transports, got {type(inner).__qualname__}"
                    )
                return CorrelationStamp(inner, header)

            _stamp_transports(arguments, stamped, httpx.HTTPTransport)
            _add_hook(arguments, assign_correlation_id)
        return create_client(
            name,
            self._options[name],
            clock=self._clock,
            listeners=self._listeners,
            **arguments,
        )


def _configured_names(config: Mapping[str, Any] | None) -> list[str]:
    """The client names with a section of their own in `config`."""
    section: object = config or {}
    for part in (*HttpResilienceOptions.SECTION.split("."), "clients"):
        if not isinstance(section, Mapping):
            # `from_config` names the section that is not a mapping.
            return []
        section = cast("Mapping[str, object]", section).get(part, {})
    if not isinstance(section, Mapping):
        return []
    return [str(name) for name in cast("Mapping[object, object]", section)]


def _stamp_transports(
    arguments: dict[str, Any],
    stamped: Callable[[object], object],
    default: Callable[..., object],
) -> None:
    """Put the stamp below the pipeline: around ``transport`` and every mount.

    Without ``transport``, the default one is built here from the arguments
    httpx would build it from, as `create_async_client` does.
    """
    inner: object = arguments.pop("transport", None)
    if inner is None:
        building: dict[str, Any] = {
            key: arguments.pop(key) for key in _TRANSPORT_ARGUMENTS if key in arguments
        }
        if "trust_env" in arguments:
            building["trust_env"] = arguments["trust_env"]
        inner = default(**building)
    arguments["transport"] = stamped(inner)
    mounts = cast("Mapping[str, object] | None", arguments.get("mounts"))
    if mounts:
        arguments["mounts"] = {
            pattern: None if mounted is None else stamped(mounted)
            for pattern, mounted in mounts.items()
        }


def _add_hook(arguments: dict[str, Any], hook: Callable[..., object]) -> None:
    """Run `hook` first among the client's request hooks."""
    hooks = dict(cast("Mapping[str, Any]", arguments.get("event_hooks") or {}))
    hooks["request"] = [hook, *hooks.get("request", ())]
    arguments["event_hooks"] = hooks
