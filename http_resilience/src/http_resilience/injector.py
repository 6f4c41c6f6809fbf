"""Named HTTP clients for `injector`: install ``http-resilience[injector]``.

`HttpClientsModule` binds one `HttpClientFactory` for the injector's life: each
client name has its own options and httpx arguments, and each name's client is
built once and shared. Every attempt of every call carries a correlation id
(`correlation_id`, `current_correlation_id`).

Only this module imports `injector`; the rest of `http_resilience` never does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from injector import Binder, InstanceProvider, Module

from http_resilience._clients.factory import HttpClientFactory
from http_resilience._core.clock import Clock
from http_resilience._core.correlation import correlation_id, current_correlation_id
from http_resilience._core.events import HttpEventListener
from http_resilience._fleet.state import SharedState
from http_resilience._transport.stamp import DEFAULT_CORRELATION_HEADER

__all__ = [
    "HttpClientFactory",
    "HttpClientsModule",
    "correlation_id",
    "current_correlation_id",
]


class HttpClientsModule(Module):
    """The injector module that provides one `HttpClientFactory`.

    Args:
        configure: Called once, here, with the factory, to `add` clients (each
            with its options, or a `ResiliencePipeline` of its own). Its return
            value is ignored; when it returns, the factory's names are fixed.
        config: The whole configuration mapping (see `HttpClientFactory`).
        clock: Every client's clock; `FakeClock` in tests.
        listeners: Called with every client's events.
        correlation_header: The header that carries the correlation id
            (default ``X-Correlation-ID``); None sends none.
        correlation: Where each call's id is read first, such as
            ``mediator.current_correlation_id``, so HTTP calls carry the id of
            the mediator's audit records; a valid id it returns is sent, else
            the id of `correlation_id`, else a new one (see
            `HttpClientFactory`).
        shared: A `SharedState` every client shares its retry budget,
            published quota and breakers through, with every replica (see
            `HttpClientFactory`); close it after the factory.

    Every option is read and checked on this call, naming the client at fault,
    and so is the configuration's use of names: a ``resilience.http.clients``
    section for a client that was not added, or a
    ``RESILIENCE__HTTP__CLIENTS__<NAME>__...`` variable whose name is a near
    miss of one that was, is refused (see `HttpClientFactory`). The injector
    hands out the same factory every time; close it when the application
    stops (``await factory.aclose()``).

    Raises:
        pydantic.ValidationError: A client's configured options are invalid.
        ResilienceLayerError: A transport given to `add` is already resilient.
        TypeError: `add` got options and a pipeline, or a client that can be
            neither async nor sync (a hedging pipeline over a sync transport).
        ValueError: A name is added twice, configuration is for a client the
            factory does not have, or `correlation_header` is not a header name
            or names one httpx sets itself (`Host`, ...).
        TypeError: `correlation` is neither callable nor None, or `shared`
            is not a `SharedState`.

    Example:
        >>> import asyncio, httpx
        >>> from injector import Injector
        >>> module = HttpClientsModule(
        ...     lambda clients: clients.add(
        ...         "inventory",
        ...         base_url="http://inventory.local",
        ...         transport=httpx.MockTransport(
        ...             lambda request: httpx.Response(
        ...                 200, text=request.headers["X-Correlation-ID"]
        ...             )
        ...         ),
        ...     )
        ... )
        >>> factory = Injector([module]).get(HttpClientFactory)
        >>> async def main() -> str:
        ...     with correlation_id("order-42"):
        ...         response = await factory.async_client("inventory").get("/items")
        ...     await factory.aclose()
        ...     return response.text
        >>> asyncio.run(main())
        'order-42'
    """

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
        def add_clients(factory: HttpClientFactory) -> None:
            if configure is not None:
                configure(factory)

        # Always through `configure`: the names are fixed, and the configuration
        # checked against them, here, even with no client to add.
        self.factory = HttpClientFactory(
            add_clients,
            config=config,
            clock=clock,
            listeners=listeners,
            correlation_header=correlation_header,
            correlation=correlation,
            shared=shared,
        )

    def configure(self, binder: Binder) -> None:
        """Bind `HttpClientFactory` to this module's one factory."""
        binder.bind(HttpClientFactory, to=InstanceProvider(self.factory))


from http_resilience._primitives.public_names import publish as _publish  # noqa: E402

_publish(__name__, __all__)
