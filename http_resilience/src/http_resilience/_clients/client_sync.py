# Generated from client.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""`create_client`: a long-lived client with one pipeline per transport."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from http_resilience._clients.arguments import resolve, split_arguments
from http_resilience._clients.env_proxies import (
    ProxyRouter,
    environment_proxies,
)
from http_resilience._core.clock import Clock
from http_resilience._core.deadline import DEADLINE_HEADER
from http_resilience._core.events import HttpEventListener
from http_resilience._core.send import Stamp
from http_resilience._fleet.state import SharedState
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import HttpResilienceOptions
from http_resilience._transport.registry import remember_transports
from http_resilience._transport.transport import ResilientTransport

__all__ = ["build_client", "create_client"]


def create_client(
    name: str = "default",
    options: HttpResilienceOptions | None = None,
    *,
    pipeline: ResiliencePipeline | None = None,
    config: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    listeners: Sequence[HttpEventListener] = (),
    deadline_header: str | None = DEADLINE_HEADER,
    shared: SharedState | None = None,
    **httpx_kwargs: Any,
) -> httpx.Client:
    """An `httpx.Client` whose transport runs the standard pipeline, or yours.

    Build it once and keep it: the per-host breakers live on its transport, and
    a client rebuilt per call starts every breaker afresh.

    ``transport=`` names the transport to wrap (default: an
    `httpx.HTTPTransport` built from ``verify``, ``cert``, ``http1``,
    ``http2``, ``limits``, ``proxy`` and ``trust_env``, as httpx would). Each
    transport in ``mounts=`` is wrapped in a pipeline of its own with the same
    options. With ``trust_env`` on (the default) and neither ``transport=``
    nor ``proxy=`` given, the environment's proxies apply as in httpx
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, read once,
    here), under the same pipeline as direct calls: one limiter, budget and
    breaker per host for the whole client. With `own_transport_timeout` (the
    default) the pipeline sets each attempt's httpx timeouts, so ``timeout=``
    has no effect.

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
        deadline_header: The header each attempt carries with the
            milliseconds it has left; None sends none. Default
            ``X-Request-Timeout-Ms``.
        shared: A `SharedState`: the retry budget, the published quota and
            the breakers are shared with every replica's client of the same
            name (the ``redis`` extra). None: this process only.
        **httpx_kwargs: Passed to `httpx.Client` (``base_url``,
            ``headers``, ``auth``, ...).

    Raises:
        ResilienceLayerError: ``transport=`` or a mounted transport is already
            resilient: one resilience layer per client.
        TypeError: A transport of the wrong kind, ``proxy=`` beside
            ``transport=`` (httpx would route around the pipeline), or
            `pipeline` with `options` or `config`, or a `pipeline` that
            hedges: a blocking attempt cannot be cancelled.
        httpx.InvalidURL: ``base_url=`` or ``proxy=`` does not parse; the
            message names it an unparseable URL, never quoting it.
        ValueError: ``proxy=`` has a scheme httpx does not proxy through; the
            message names its scheme, host and port only.
        pydantic.ValidationError: Invalid configuration, naming the client.

    Example:
        >>> def main() -> int:
        ...     with create_client(
        ...         "inventory",
        ...         base_url="http://inventory.local",
        ...         transport=httpx.MockTransport(lambda r: httpx.Response(200)),
        ...     ) as client:
        ...         return (client.get("/items")).status_code
        >>> main()
        200
    """
    return build_client(
        name,
        options,
        pipeline=pipeline,
        config=config,
        clock=clock,
        listeners=listeners,
        stamp=None,
        deadline_header=deadline_header,
        shared=shared,
        **httpx_kwargs,
    )


def build_client(
    name: str,
    options: HttpResilienceOptions | None,
    *,
    pipeline: ResiliencePipeline | None,
    config: Mapping[str, Any] | None,
    clock: Clock | None,
    listeners: Sequence[HttpEventListener],
    stamp: Stamp | None,
    deadline_header: str | None = DEADLINE_HEADER,
    shared: SharedState | None = None,
    **httpx_kwargs: Any,
) -> httpx.Client:
    """`create_client`, whose transports run `stamp` on every attempt.

    The factory's clients are built so, to send the call's correlation id.
    """
    transport, building, mounts = split_arguments(name, httpx_kwargs)
    resolved, custom = resolve(options, pipeline, config, name, sync=True)
    router: ProxyRouter | None = None
    if transport is None:
        proxies = environment_proxies(building)
        if any(url is not None for url in proxies.values()):
            # httpx's transport, with the environment's proxies beside it.
            transport = router = ProxyRouter(proxies, building)
        else:  # nothing to route: no check on each attempt
            transport = httpx.HTTPTransport(**building)

    built: list[ResilientTransport] = []

    def resilient(inner: object) -> ResilientTransport:
        if not isinstance(inner, httpx.BaseTransport):
            raise TypeError(
                f"HTTP client {name!r}: a sync client needs sync transports, "
                f"got {type(inner).__qualname__}"
            )
        made = ResilientTransport(
            inner,
            options=resolved,
            pipeline=custom,
            name=name,
            clock=clock,
            listeners=listeners,
            deadline_header=deadline_header,
            shared=shared,
            _stamp=stamp,
        )
        built.append(made)
        return made

    main = resilient(transport)
    # The environment's mounts first, yours over them: httpx's order.
    every: dict[str, httpx.BaseTransport | None] = (
        {} if router is None else router.mounts(main)
    )
    every.update(
        (pattern, None if mounted is None else resilient(mounted))
        for pattern, mounted in mounts.items()
    )
    client = httpx.Client(transport=main, mounts=every, **httpx_kwargs)
    return remember_transports(client, built)
