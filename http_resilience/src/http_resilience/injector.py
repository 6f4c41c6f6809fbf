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

from http_resilience._clock import Clock
from http_resilience._correlation import (
    DEFAULT_CORRELATION_HEADER,
    correlation_id,
    current_correlation_id,
)
from http_resilience._events import HttpEventListener
from http_resilience._factory import HttpClientFactory

__all__ = [
    "HttpClientFactory",
    "HttpClientsModule",
    "correlation_id",
    "current_correlation_id",
]


class HttpClientsModule(Module):
    """The injector module that provides one `HttpClientFactory`.

    Args:
        configure: Called once, here, with the factory, to `add` clients. Its
            return value is ignored.
        config: The whole configuration mapping (see `HttpClientFactory`).
        clock: Every client's clock; `FakeClock` in tests.
        listeners: Called with every client's events.
        correlation_header: The header that carries the correlation id
            (default ``X-Correlation-ID``); None sends none.

    Every option is read and checked on this call, naming the client at fault.
    The injector hands out the same factory every time; close it when the
    application stops (``await factory.aclose()``).

    Raises:
        pydantic.ValidationError: A client's configured options are invalid.
        ResilienceLayerError: A transport given to `add` is already resilient.
        ValueError: A name is added twice, or `correlation_header` is not a
            header name or names one httpx sets itself (`Host`, ...).

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
    ) -> None:
        self.factory = HttpClientFactory(
            config=config,
            clock=clock,
            listeners=listeners,
            correlation_header=correlation_header,
        )
        if configure is not None:
            configure(self.factory)

    def configure(self, binder: Binder) -> None:
        """Bind `HttpClientFactory` to this module's one factory."""
        binder.bind(HttpClientFactory, to=InstanceProvider(self.factory))
