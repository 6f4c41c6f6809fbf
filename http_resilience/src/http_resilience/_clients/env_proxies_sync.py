# Generated from env_proxies.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync clients' proxy router and mounts.

All calls of a client go through its one resilient transport, proxied or
not: one limiter, one retry budget, one breaker per host, whichever way a
call leaves. So a proxy gets no resilient transport of its own. Its mount
(`ProxyMount`) tags the call with the proxy and hands it to the client's
resilient transport; the transport that one wraps (`ProxyRouter`, httpx's
transport extended) sends each attempt of a tagged call through that proxy,
and any other attempt direct. It extends httpx's transport rather than wraps
it, so the pool sweep and the sync deadlines still see its direct pool. The
proxies come from the environment as httpx reads them (`proxy_env`).

Generated from `http_resilience._clients.env_proxies` by ``tools/unasync.py``:
edit that one and run the script.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from http_resilience._clients.proxy_env import (
    MountBase,
    proxy_transports,
    routed,
    tagged,
)

__all__ = ["ProxyMount", "ProxyRouter"]


class ProxyRouter(httpx.HTTPTransport):
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
        self._via = proxy_transports(proxies, building, httpx.HTTPTransport)

    def mounts(
        self, resilient: httpx.BaseTransport
    ) -> dict[str, httpx.BaseTransport | None]:
        """The client's mounts for the proxies: each enters `resilient`, tagged."""
        return {
            pattern: None if url is None else ProxyMount(resilient, self._via[pattern])
            for pattern, url in self._proxies.items()
        }

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the proxy its `ROUTE` names, or direct."""
        proxy = routed(request, self._via.values())
        if proxy is None:
            return super().handle_request(request)
        return proxy.handle_request(request)

    def close(self) -> None:
        """Close the direct pool and every proxy's."""
        for proxy in self._via.values():
            proxy.close()
        super().close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Exit the direct pool and every proxy's (httpx's exits only its own)."""
        for proxy in self._via.values():
            proxy.__exit__(exc_type, exc_value, traceback)
        super().__exit__(exc_type, exc_value, traceback)


class ProxyMount(MountBase[httpx.BaseTransport], httpx.BaseTransport):
    """A proxy's mount: the call runs through the client's resilient transport.

    The request carries `ROUTE` while the call runs, so every attempt the
    pipeline makes of it goes through `proxy`; the caller's extensions are
    put back when it returns. Closing it closes nothing: the client closes its
    resilient transport, which closes the router and the proxies.

    Args:
        resilient: The client's resilient transport, around a
            `ProxyRouter`.
        proxy: The router's transport for this proxy.
    """

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Run `request` through the resilient transport, tagged for the proxy."""
        with tagged(request, self._proxy):
            return self._resilient.handle_request(request)

    def close(self) -> None:
        """Nothing to close: the resilient transport owns the proxy's."""
