"""`create_async_client` and `create_client`: long-lived clients, one pipeline each."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

import httpx

from http_resilience._builder import ResiliencePipeline
from http_resilience._clock import Clock
from http_resilience._events import HttpEventListener
from http_resilience._options import HttpResilienceOptions
from http_resilience._transport import (
    AsyncResilientTransport,
    ResilientTransport,
    refuse_second_layer,
    resolve_options,
    resolve_pipeline,
)

__all__ = ["create_async_client", "create_client"]

# The client's arguments that configure the transport it would build itself.
# `proxy` above all: given to the client, it would mount a proxy transport that
# bypasses the pipeline.
_TRANSPORT_ARGUMENTS: Final = ("verify", "cert", "http1", "http2", "limits", "proxy")


def _split(
    name: str, httpx_kwargs: dict[str, Any]
) -> tuple[object, dict[str, Any], dict[str, object]]:
    transport: object = httpx_kwargs.pop("transport", None)
    refuse_second_layer(transport, name)
    building: dict[str, Any] = {}
    if transport is not None and httpx_kwargs.get("proxy") is not None:
        # httpx would mount a proxy transport of its own, around the pipeline.
        raise TypeError(
            f"HTTP client {name!r}: proxy= goes to the transport you pass as "
            "transport=, not to the client"
        )
    if transport is None:
        for argument in _TRANSPORT_ARGUMENTS:
            if argument in httpx_kwargs:
                building[argument] = httpx_kwargs.pop(argument)
        if "trust_env" in httpx_kwargs:
            building["trust_env"] = httpx_kwargs["trust_env"]
    mounts: dict[str, object] = dict(httpx_kwargs.pop("mounts", None) or {})
    for mounted in mounts.values():
        refuse_second_layer(mounted, name)
    return transport, building, mounts


def _resolve(
    options: object, pipeline: object, config: object, name: str, *, sync: bool
) -> tuple[HttpResilienceOptions | None, ResiliencePipeline | None]:
    """The standard pipeline's options, or the custom pipeline: checked once."""
    if pipeline is None:
        return resolve_options(
            options, cast("Mapping[str, Any] | None", config), name
        ), None
    return None, resolve_pipeline(pipeline, options, config, name, sync=sync)


def create_async_client(
    name: str = "default",
    options: HttpResilienceOptions | None = None,
    *,
    pipeline: ResiliencePipeline | None = None,
    config: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    listeners: Sequence[HttpEventListener] = (),
    **httpx_kwargs: Any,
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` whose transport runs the standard pipeline, or yours.

    Build it once and keep it: the per-host breakers live on its transport, and
    a client rebuilt per call starts every breaker afresh.

    ``transport=`` names the transport to wrap (default: an
    `httpx.AsyncHTTPTransport` built from ``verify``, ``cert``, ``http1``,
    ``http2``, ``limits``, ``proxy`` and ``trust_env``, as httpx would). Each
    transport in ``mounts=`` is wrapped in a pipeline of its own with the same
    options. Environment proxies are not read, as with any explicit httpx
    transport: pass ``proxy=``. With `own_transport_timeout` (the default) the
    pipeline sets each attempt's httpx timeouts, so ``timeout=`` has no effect.

    Args:
        name: The client's name: its configuration section, and in events,
            logs and errors.
        options: The standard pipeline's options; None (and no `pipeline`)
            reads them for `name` from `config` and the environment
            (`HttpResilienceOptions.from_config`).
        pipeline: A `ResiliencePipeline` to run instead of the standard one;
            each transport builds its own strategies from it.
        config: The whole configuration mapping, read when `options` is None.
        clock: Where time is read and waits happen; `FakeClock` in tests.
        listeners: Called with every event.
        **httpx_kwargs: Passed to `httpx.AsyncClient` (``base_url``,
            ``headers``, ``auth``, ...).

    Raises:
        ResilienceLayerError: ``transport=`` or a mounted transport is already
            resilient: one resilience layer per client.
        TypeError: A transport of the wrong kind, ``proxy=`` beside
            ``transport=`` (httpx would route around the pipeline), or
            `pipeline` with `options` or `config`.
        pydantic.ValidationError: Invalid configuration, naming the client.

    Example:
        >>> import asyncio
        >>> async def main() -> int:
        ...     async with create_async_client(
        ...         "inventory",
        ...         base_url="http://inventory.local",
        ...         transport=httpx.MockTransport(lambda r: httpx.Response(200)),
        ...     ) as client:
        ...         return (await client.get("/items")).status_code
        >>> asyncio.run(main())
        200
    """
    client = _build(
        name,
        options,
        pipeline,
        config,
        httpx_kwargs,
        sync=False,
        make_resilient=lambda inner, resolved, custom: AsyncResilientTransport(
            inner,
            options=resolved,
            pipeline=custom,
            name=name,
            clock=clock,
            listeners=listeners,
        ),
    )
    return cast(httpx.AsyncClient, client)


def create_client(
    name: str = "default",
    options: HttpResilienceOptions | None = None,
    *,
    pipeline: ResiliencePipeline | None = None,
    config: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    listeners: Sequence[HttpEventListener] = (),
    **httpx_kwargs: Any,
) -> httpx.Client:
    """The sync twin of `create_async_client`: an `httpx.Client`.

    Args:
        name: As for `create_async_client`.
        options: As for `create_async_client`.
        pipeline: As for `create_async_client`, without hedging.
        config: As for `create_async_client`.
        clock: As for `create_async_client`; waits use `sleep_sync`.
        listeners: As for `create_async_client`.
        **httpx_kwargs: Passed to `httpx.Client`.

    Raises:
        ResilienceLayerError: As for `create_async_client`.
        TypeError: As for `create_async_client`, and for a `pipeline` that
            hedges: a blocking attempt cannot be cancelled.
        pydantic.ValidationError: Invalid configuration, naming the client.

    Example:
        >>> with create_client(
        ...     "inventory",
        ...     transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        ... ) as client:
        ...     client.get("http://inventory.local/items").status_code
        200
    """
    client = _build(
        name,
        options,
        pipeline,
        config,
        httpx_kwargs,
        sync=True,
        make_resilient=lambda inner, resolved, custom: ResilientTransport(
            inner,
            options=resolved,
            pipeline=custom,
            name=name,
            clock=clock,
            listeners=listeners,
        ),
    )
    return cast(httpx.Client, client)


def _build(
    name: str,
    options: HttpResilienceOptions | None,
    pipeline: ResiliencePipeline | None,
    config: Mapping[str, Any] | None,
    httpx_kwargs: dict[str, Any],
    *,
    sync: bool,
    make_resilient: Callable[
        [Any, HttpResilienceOptions | None, ResiliencePipeline | None], object
    ],
) -> httpx.Client | httpx.AsyncClient:
    """The one core of both factories.

    Builds the inner transport, each mount and the client, with every
    transport wrapped in its own pipeline.
    """
    transport, building, mounts = _split(name, httpx_kwargs)
    resolved, custom = _resolve(options, pipeline, config, name, sync=sync)
    if transport is None:
        transport = (
            httpx.HTTPTransport(**building)
            if sync
            else httpx.AsyncHTTPTransport(**building)
        )
    base = httpx.BaseTransport if sync else httpx.AsyncBaseTransport
    kind = "a sync client needs sync" if sync else "an async client needs async"

    def resilient(inner: object) -> Any:
        if not isinstance(inner, base):
            raise TypeError(
                f"HTTP client {name!r}: {kind} transports, "
                f"got {type(inner).__qualname__}"
            )
        return make_resilient(inner, resolved, custom)

    client_class = httpx.Client if sync else httpx.AsyncClient
    return client_class(
        transport=resilient(transport),
        mounts={
            pattern: None if mounted is None else resilient(mounted)
            for pattern, mounted in mounts.items()
        },
        **httpx_kwargs,
    )
