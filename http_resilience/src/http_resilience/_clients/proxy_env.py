"""The environment's proxies, for the clients built here, as httpx reads them.

`httpx.Client()` honours ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and
``NO_PROXY`` (any case) with ``trust_env`` on, but only when it builds its
transport itself: given ``transport=``, it reads no proxy. A client built here
always gives httpx its resilient transport, so it reads them itself
(`environment_proxies`), with `urllib.request.getproxies` (what httpx reads
too) turned into httpx's documented mount patterns; httpx's own reader is
private.

Here too is what the async and the sync proxy router share (`env_proxies`,
and `env_proxies_sync` generated from it): the `ROUTE` a call is tagged with,
the proxies' transports, and the mounts' state.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Callable, Generator, Iterable, Mapping
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar

import httpx

from http_resilience._transport.sync_deadline import hold_deadlines

__all__ = [
    "ROUTE",
    "MountBase",
    "environment_proxies",
    "proxy_transports",
    "routed",
    "tagged",
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


def proxy_transports(
    proxies: Mapping[str, str | None],
    building: Mapping[str, Any],
    make: Callable[..., _T],
) -> dict[str, _T]:
    """A transport per proxy (`make`), built from `building` but its ``proxy``.

    A sync one holds each attempt to its deadline as the direct one does
    (`hold_deadlines`); an async one is left as it is.
    """
    others = {key: value for key, value in building.items() if key != "proxy"}
    made = {
        pattern: make(proxy=url, **others)
        for pattern, url in proxies.items()
        if url is not None
    }
    for transport in made.values():
        hold_deadlines(transport)
    return made


def routed(request: httpx.Request, proxies: Iterable[_T]) -> _T | None:
    """The proxy's transport `request`'s `ROUTE` names; None: it goes direct."""
    via: object = request.extensions.get(ROUTE)
    for proxy in proxies:
        if via is proxy:
            return proxy
    return None


@contextmanager
def tagged(request: httpx.Request, proxy: object) -> Generator[None]:
    """`request` carries `ROUTE` for `proxy`; its own extensions are put back."""
    own = request.extensions
    request.extensions = {**own, ROUTE: proxy}
    try:
        yield
    finally:
        request.extensions = own


class MountBase(Generic[_T]):
    """What both proxy mounts hold: the client's resilient transport, the proxy's."""

    def __init__(self, resilient: _T, proxy: _T) -> None:
        self._resilient = resilient
        self._proxy = proxy
