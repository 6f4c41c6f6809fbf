"""A host's key: scheme, host and port, normalised, safe to log.

``HTTPS://Example.COM.:443`` and ``https://example.com`` are one host. Path,
query and userinfo never take part. Per-host state (the breakers' registry)
is kept under this key, and every message, log line, event and span that names
a target names it so (`safe_target` for a URL that came from a user).
"""

from __future__ import annotations

import functools
from typing import Final

import httpx

__all__ = [
    "DEFAULT_PORTS",
    "NO_HOST",
    "UNPARSEABLE_URL",
    "host_key",
    "safe_target",
]

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}

UNPARSEABLE_URL: Final = "<unparseable URL>"
"""What a message says of a URL that does not parse: its text is never quoted."""

NO_HOST: Final = "<URL without a scheme or host>"
"""What a message says of a URL with no host: what it has is no known part."""


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
    # (scheme, host, port), from a bounded cache, read from the parsed parts
    # httpx keeps when it keeps them (its properties read the same ones).
    if _PARSED:
        parts = url._uri_reference  # pyright: ignore[reportPrivateUsage]
        host = parts.host
        if not host.startswith("xn--"):  # else: `url.host` decodes it
            return _key(parts.scheme, host, parts.port)
    return _key(url.scheme, url.host, url.port)


def _parsed() -> bool:
    """Whether `httpx.URL` keeps its parts as `host_key` reads them."""
    url = httpx.URL("HTTP://Example.COM:8080/p")
    parts = getattr(url, "_uri_reference", None)
    return (
        getattr(parts, "scheme", None) == url.scheme
        and getattr(parts, "host", None) == url.host
        and getattr(parts, "port", None) == url.port
    )


_PARSED: Final = _parsed()


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


def safe_target(value: object) -> str:
    """What a message may say of `value`, a URL: ``scheme://host:port`` only.

    Userinfo (a password), path, query (a ``?token=``) and fragment are left
    out. A URL with no scheme or no host is `NO_HOST`: in ``user:pw@host``
    the user reads as a scheme and the rest as a path, so no part of it can
    be trusted to be no secret. One that does not parse is `UNPARSEABLE_URL`,
    anything else its type in angle brackets: none of them is quoted.

    Args:
        value: A `str` or `httpx.URL`, usually; anything is described.

    Example:
        >>> safe_target("https://user:secret@api.example/v1?token=x#top")
        'https://api.example:443'
        >>> safe_target("https://user:secret@[::1")
        '<unparseable URL>'
        >>> safe_target("user:secret@api.example/v1?token=x")
        '<URL without a scheme or host>'
        >>> safe_target(b"https://api.example")
        '<bytes>'
    """
    if isinstance(value, httpx.URL):
        url = value
    elif isinstance(value, str):
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL:
            return UNPARSEABLE_URL
    else:
        return f"<{type(value).__qualname__}>"
    if not url.scheme or not url.host:
        return NO_HOST
    return host_key(url)
