"""A host's key: scheme, host and port, normalised, safe to log.

``HTTPS://Example.COM.:443`` and ``https://example.com`` are one host. Path,
query and userinfo never take part. Per-host state (the breakers' registry)
is kept under this key.
"""

from __future__ import annotations

import functools
from typing import Final

import httpx

__all__ = ["DEFAULT_PORTS", "host_key"]

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def host_key(url: httpx.URL) -> str:
    """``scheme://host:port`` of `url`, normalised.

    The scheme and host in lower case, the host without a trailing dot, an
    IPv6 host in brackets, and the port always written (the scheme's default
    when the URL has none).

    Example:
        >>> host_key(httpx.URL("HTTPS://user:secret@Example.COM.:443/a?token=x"))
        'https://example.com:443'
        >>> host_key(httpx.URL("http://[::1]:8080/"))
        'http://[::1]:8080'
    """
    # A client sends to few hosts, over and over: the key is made once per
    # (scheme, host, port), from a bounded cache.
    return _key(url.scheme, url.host, url.port)


@functools.lru_cache(maxsize=256)
def _key(scheme: str, host: str, port: int | None) -> str:
    # httpx gives the scheme and a named host in lower case already (a named
    # host IDNA-decoded); an IPv6 host keeps the case it was written in.
    if host.endswith("."):
        host = host.rstrip(".")
    if ":" in host:
        host = f"[{host.lower()}]"
    port = port or DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"
