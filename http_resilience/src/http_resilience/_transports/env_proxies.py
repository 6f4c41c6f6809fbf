"""The environment's proxies, for the clients built here, as httpx reads them.

`httpx.Client()` honours ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and
``NO_PROXY`` (any case) with ``trust_env`` on, but only when it builds its
transport itself: given ``transport=``, it reads no proxy. A client built here
always gives httpx its resilient transport, so it reads them itself
(`environment_proxies`), with `urllib.request.getproxies` (what httpx reads
too) turned into httpx's documented mount patterns; httpx's own reader is
private.

All calls of a client go through its one resilient transport, proxied or
not: one limiter, one retry budget, one breaker per host, whichever way a
call leaves. So a proxy gets no resilient transport of its own. Its mount
(`AsyncProxyMount`) tags the call with the proxy and hands it to the client's
resilient transport; the transport that one wraps (`AsyncProxyRouter`, httpx's
transport extended) sends each attempt of a tagged call through that proxy,
and any other attempt direct. It extends httpx's transport rather than wraps
it, so the pool sweep and the sync deadlines still see its direct pool.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Callable, Generator, Iterable, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

import httpx

from http_resilience._transports.sync_deadline import hold_deadlines

__all__ = [
    "ROUTE",
    "AsyncProxyMount",
    "AsyncProxyRouter",
    "ProxyMount",
    "ProxyRouter",
    "environment_proxies",
]

ROUTE: Final = "http_resilience.proxy"
"""The request extension that names the proxy a call's attempts go through."""

ProxyMap = dict[str, str | None]
_T = TypeVar("_T")


def environment_proxies(building: Mapping[str, Any]) -> ProxyMap:
    """The mounts httpx would make from the environment: pattern to proxy URL.

    A pattern mapped to None goes direct (a ``NO_PROXY`` host). Empty when
    httpx would read nothing either: ``trust_env=False`` or a ``proxy=``
    among `building`, the arguments the client's transport is built from.
    """
    if not building.get("trust_env", True) or building.get("proxy") is not None:
        return {}
    found = urllib.request.getproxies()
    patterns: ProxyMap = {}
    for scheme in ("http", "https", "all"):
        url = found.get(scheme)
        if url:
            patterns[f"{scheme}://"] = url if "://" in url else f"http://{url}"
    for entry in found.get("no", "").split(","):
        host = entry.strip()
        if host == "*":
            return {}  # every host goes direct
        if host:
            patterns[_direct_pattern(host)] = None
    return patterns


def _direct_pattern(host: str) -> str:
    """The mount pattern of one ``NO_PROXY`` entry.

    A URL is a pattern already; an address or ``localhost`` names that host
    alone; any other name matches itself and every name ending with it
    (``example.com`` is also ``www.example.com``, as in curl).
    """
    if "://" in host:
        return host
    try:
        address = ipaddress.ip_address(host.split("/")[0])
    except ValueError:
        return f"all://{host}" if host.lower() == "localhost" else f"all://*{host}"
    return f"all://[{host}]" if address.version == 6 else f"all://{host}"


def _proxy_transports(
    proxies: Mapping[str, str | None],
    building: Mapping[str, Any],
    make: Callable[..., _T],
) -> dict[str, _T]:
    """A transport per proxy (`make`), built from `building` but its ``proxy``."""
    others = {key: value for key, value in building.items() if key != "proxy"}
    return {
        pattern: make(proxy=url, **others)
        for pattern, url in proxies.items()
        if url is not None
    }


def _routed(request: httpx.Request, proxies: Iterable[_T]) -> _T | None:
    """The proxy's transport `request`'s `ROUTE` names; None: it goes direct."""
    via: object = request.extensions.get(ROUTE)
    for proxy in proxies:
        if via is proxy:
            return proxy
    return None


@contextmanager
def _tagged(request: httpx.Request, proxy: object) -> Generator[None]:
    """`request` carries `ROUTE` for `proxy`; its own extensions are put back."""
    own = request.extensions
    request.extensions = {**own, ROUTE: proxy}
    try:
        yield
    finally:
        request.extensions = own


class _Mount(Generic[_T]):
    """What both proxy mounts hold: the client's resilient transport, the proxy's."""

    def __init__(self, resilient: _T, proxy: _T) -> None:
        self._resilient = resilient
        self._proxy = proxy


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
        self._via = _proxy_transports(proxies, building, httpx.AsyncHTTPTransport)

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
        proxy = _routed(request, self._via.values())
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


class AsyncProxyMount(_Mount[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
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
        with _tagged(request, self._proxy):
            return await self._resilient.handle_async_request(request)

    async def aclose(self) -> None:
        """Nothing to close: the resilient transport owns the proxy's."""


class ProxyRouter(httpx.HTTPTransport):
    """The sync twin of `AsyncProxyRouter`.

    The proxies' transports hold each attempt to its deadline as the direct
    one does (`hold_deadlines`).

    Args:
        proxies: As for `AsyncProxyRouter`.
        building: As for `AsyncProxyRouter`.
    """

    def __init__(self, proxies: Mapping[str, str | None], building: Mapping[str, Any]):
        super().__init__(**building)
        self._proxies = proxies
        self._via = _proxy_transports(proxies, building, httpx.HTTPTransport)
        for proxy in self._via.values():
            hold_deadlines(proxy)

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
        proxy = _routed(request, self._via.values())
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
        """As `AsyncProxyRouter.__aexit__`: every proxy's pool too."""
        for proxy in self._via.values():
            proxy.__exit__(exc_type, exc_value, traceback)
        super().__exit__(exc_type, exc_value, traceback)


class ProxyMount(_Mount[httpx.BaseTransport], httpx.BaseTransport):
    """The sync twin of `AsyncProxyMount`.

    Args:
        resilient: The client's resilient transport, around a `ProxyRouter`.
        proxy: The router's transport for this proxy.
    """

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """As `AsyncProxyMount.handle_async_request`."""
        with _tagged(request, self._proxy):
            return self._resilient.handle_request(request)

    def close(self) -> None:
        """Nothing to close: the resilient transport owns the proxy's."""
