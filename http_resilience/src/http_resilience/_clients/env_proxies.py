"""The async clients' proxy router and mounts; the sync ones beside it.

All calls of a client go through its one resilient transport, proxied or
not: one limiter, one retry budget, one breaker per host, whichever way a
call leaves. So a proxy gets no resilient transport of its own. Its mount
(`AsyncProxyMount`) tags the call with the proxy and hands it to the client's
resilient transport; the transport that one wraps (`AsyncProxyRouter`, httpx's
transport extended) sends each attempt of a tagged call through that proxy,
and any other attempt direct. It extends httpx's transport rather than wraps
it, so the pool sweep and the sync deadlines still see its direct pool. The
proxies come from the environment as httpx reads them (`proxy_env`).

The sync router and mount, in `http_resilience._clients.env_proxies_sync`,
are generated from this module by ``tools/unasync.py``: edit this one and run
the script.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

# The names this module has always been imported from (`ROUTE`,
# `environment_proxies`, the sync twins) are re-exported here.
from http_resilience._clients.env_proxies_sync import (  # unasync: async-only
    ProxyMount as ProxyMount,
)
from http_resilience._clients.env_proxies_sync import (  # unasync: async-only
    ProxyRouter as ProxyRouter,
)
from http_resilience._clients.proxy_env import (  # unasync: async-only
    ROUTE as ROUTE,
)
from http_resilience._clients.proxy_env import (
    MountBase,
    proxy_transports,
    routed,
    tagged,
)
from http_resilience._clients.proxy_env import (  # unasync: async-only
    environment_proxies as environment_proxies,
)

__all__ = ["AsyncProxyMount", "AsyncProxyRouter"]


class AsyncProxyRouter(httpx.AsyncHTTPTransport):
    """httpx's transport, and one more per environment proxy to send through.

    An attempt tagged with `ROUTE` goes through the proxy it names; any other
    goes direct, as httpx's transport would send it. Closing it closes the
    proxies' transports too.

    Args:
        proxies: `environment_proxies`; the patterns mapped to None add no
            transport.
        building: The arguments of httpx's transport (``verify``, ``limits``,
            ...), for the proxies' transports as well.
    """

    def __init__(self, proxies: Mapping[str, str | None], building: Mapping[str, Any]):
        super().__init__(**building)
        self._proxies = proxies
        self._via = proxy_transports(proxies, building, httpx.AsyncHTTPTransport)

    def mounts(
        self, resilient: httpx.AsyncBaseTransport
    ) -> dict[str, httpx.AsyncBaseTransport | None]:
        """The client's mounts for the proxies: each enters `resilient`, tagged."""
        return {
            pattern: None
            if url is None
            else AsyncProxyMount(resilient, self._via[pattern])
            for pattern, url in self._proxies.items()
        }

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the proxy its `ROUTE` names, or direct."""
        proxy = routed(request, self._via.values())
        if proxy is None:
            return await super().handle_async_request(request)
        return await proxy.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the direct pool and every proxy's."""
        for proxy in self._via.values():
            await proxy.aclose()
        await super().aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Exit the direct pool and every proxy's (httpx's exits only its own)."""
        for proxy in self._via.values():
            await proxy.__aexit__(exc_type, exc_value, traceback)
        await super().__aexit__(exc_type, exc_value, traceback)


class AsyncProxyMount(MountBase[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """A proxy's mount: the call runs through the client's resilient transport.

    The request carries `ROUTE` while the call runs, so every attempt the
    pipeline makes of it goes through `proxy`; the caller's extensions are
    put back when it returns. Closing it closes nothing: the client closes its
    resilient transport, which closes the router and the proxies.

    Args:
        resilient: The client's resilient transport, around an
            `AsyncProxyRouter`.
        proxy: The router's transport for this proxy.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Run `request` through the resilient transport, tagged for the proxy."""
        with tagged(request, self._proxy):
            return await self._resilient.handle_async_request(request)

    async def aclose(self) -> None:
        """Nothing to close: the resilient transport owns the proxy's."""
