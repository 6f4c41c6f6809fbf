"""`CircuitControl`: an operator's kill switch for the hosts of one client."""

from __future__ import annotations

import httpx

from http_resilience._core.host_registry import ALL_HOSTS
from http_resilience._core.hosts import NO_HOST, UNPARSEABLE_URL, host_key
from http_resilience._core.telemetry import LOGGER
from http_resilience._fleet.breaker import AsyncSharedBreaker, SyncSharedBreaker
from http_resilience._fleet.link import ClientShare
from http_resilience._health.snapshot import (
    Target,
    breaker_strategies,
    resilient_transports,
)
from http_resilience._strategies.breaker.strategy import BreakerStrategy

__all__ = ["CircuitControl", "operator_host"]

_GIVE = "give scheme://host[:port], such as 'https://api.example.com'"


def operator_host(value: object) -> str:
    """`value` as a breaker's key: ``scheme://host:port``, or ``"*"`` as it is.

    A value refused is never quoted as given: the message names its scheme,
    host and port only, or says it is an unparseable URL or one without a
    scheme or host, since what came with it (a password, a ``?token=``) may
    be a secret.

    Raises:
        TypeError: `value` is not a string.
        ValueError: `value` is not a host: it does not parse, has no scheme or
            no host, a port out of 1-65535, or a path, query, fragment or
            credentials besides.
    """
    if not isinstance(value, str):
        raise TypeError(f"a host is a string; {_GIVE}, got {type(value).__qualname__}")
    if value == ALL_HOSTS:
        return value
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL:
        # httpx's own message quotes the part it choked on: left out.
        raise ValueError(f"{UNPARSEABLE_URL} is not a host: {_GIVE}") from None
    if not url.scheme or not url.host:
        raise ValueError(f"{NO_HOST} is not a host: {_GIVE}")
    key = host_key(url)
    if url.port is not None and not 0 < url.port < 65536:
        raise ValueError(f"{key!r} is not a host: port {url.port} is not 1-65535")
    if url.userinfo or url.query or url.fragment or url.path != "/":
        raise ValueError(
            f"{key!r} was given with a path, query or credentials: {_GIVE}, "
            "and nothing more"
        )
    return key


class CircuitControl:
    """Isolate a host of a client, or reset its breaker: an operator's kill switch.

    `isolate` refuses every call to a host in this process, from the next
    attempt on, with `BrokenCircuitError` (reported as a `RejectionEvent` of
    reason ``"circuit_open"``; ``retry_after`` None), whatever its breaker
    says, until `reset`. A host never called yet can be isolated: its first
    call is refused. `reset` lifts the isolation and closes the host's
    breaker, forgetting its window, before the next attempt; an outcome of a
    probe already in flight is then ignored. `http_resilience.health` reports
    an isolated host as ``"isolated"``.

    Both are thread-safe and return at once: a control may serve an admin
    endpoint on any thread while the client runs. The orders live on the
    client's transports, so every control made for one client sees the same
    ones; a factory's async and sync clients of one name are two clients.
    The hosts isolated are kept until reset, however many: they are what an
    operator asked for, not what traffic brought.

    On a client with a `SharedState` (``shared=``) both act across the
    replicas: `isolate` publishes the host as held open by the fleet,
    renewed at every sync (so every replica refuses it within one sync
    interval, and the order lapses within one break duration of the replica
    that holds it going away), and `reset` deletes the fleet's break at the
    next sync (woken at once), so an operator can always lift a break that
    Redis holds, whoever wrote it. Each other replica's own local breaker
    still runs out its own break.

    Args:
        target: A client made by `create_async_client`, `create_client` or an
            `HttpClientFactory` (every transport it has, mounts included), or
            an `AsyncResilientTransport` or `ResilientTransport`.

    Raises:
        TypeError: `target` is none of these, or an httpx client this package
            did not build.
        ValueError: The client's pipeline has no circuit breaker.

    Example:
        >>> from http_resilience import BrokenCircuitError, create_client
        >>> client = create_client(
        ...     "payments",
        ...     transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        ... )
        >>> control = CircuitControl(client)
        >>> control.isolate("https://payments.example.com")
        >>> try:
        ...     client.get("https://payments.example.com/charges")
        ... except BrokenCircuitError as error:
        ...     print(error)
        GET https://payments.example.com:443 (client 'payments'): circuit isolated ...
        >>> control.reset("https://payments.example.com")
        >>> client.get("https://payments.example.com/charges").status_code
        200
    """

    __slots__ = ("_name", "_shares", "_strategies")

    def __init__(self, target: Target) -> None:
        transports = resilient_transports(target, what="CircuitControl()")
        self._name = transports[0].name
        self._strategies: list[BreakerStrategy] = [
            driver.strategy
            for transport in transports
            for driver in breaker_strategies(transport)
        ]
        self._shares: list[ClientShare] = [
            driver.share
            for transport in transports
            for driver in breaker_strategies(transport)
            if isinstance(driver, AsyncSharedBreaker | SyncSharedBreaker)
        ]
        if not self._strategies:
            raise ValueError(
                f"HTTP client {self._name!r} has no circuit breaker to control"
            )

    @property
    def isolated(self) -> tuple[str, ...]:
        """The hosts isolated now, sorted."""
        return tuple(
            sorted({key for s in self._strategies for key in s.manual.isolated})
        )

    def isolate(self, host: str) -> None:
        """Refuse every call to `host` from now on, until `reset`.

        With a `SharedState`, every replica refuses it too (see the class).

        Args:
            host: ``scheme://host[:port]`` (the scheme's port by default), as
                events name it; ``"*"`` for a client whose hosts share one
                breaker (``breaker_per_host=False``): every host.

        Raises:
            TypeError: `host` is not a string.
            ValueError: `host` is not a host, or it names one host of a
                client whose hosts share one breaker, or ``"*"`` on a client
                with a breaker per host. The message names its scheme, host
                and port only, never a password, path, query or fragment
                given with it; a value that does not parse is named
                ``<unparseable URL>``.
        """
        key = self._key(host)
        changed = [s.manual.isolate(key) for s in self._strategies]
        for share in self._shares:
            share.wake()
        if any(changed):
            LOGGER.warning(
                "%s (client %r): circuit isolated by an operator%s",
                key,
                self._name,
                self._across,
            )

    def reset(self, host: str) -> None:
        """Lift an isolation of `host`, and close its breaker, forgetting its window.

        A host neither isolated nor known is left as it is. With a
        `SharedState`, the fleet's break of `host` is lifted too (see the
        class).

        Args:
            host: As for `isolate`.

        Raises:
            TypeError: `host` is not a string.
            ValueError: As for `isolate`.
        """
        key = self._key(host)
        for strategy in self._strategies:
            strategy.manual.reset(key)
        for share in self._shares:
            share.reset(key)
        LOGGER.warning(
            "%s (client %r): circuit reset by an operator%s",
            key,
            self._name,
            self._across,
        )

    @property
    def _across(self) -> str:
        return ", across the replicas" if self._shares else ""

    def _key(self, host: str) -> str:
        key = operator_host(host)
        for strategy in self._strategies:
            shared = strategy.registry is None
            if shared and key != ALL_HOSTS:
                raise ValueError(
                    f"HTTP client {self._name!r} shares one breaker between its "
                    f"hosts (breaker_per_host=False), so {key!r} cannot be told "
                    f"apart: give {ALL_HOSTS!r} for every host"
                )
            if not shared and key == ALL_HOSTS:
                raise ValueError(
                    f"HTTP client {self._name!r} has a breaker per host: "
                    f"{ALL_HOSTS!r} is not a host; {_GIVE}"
                )
        return key

    def __repr__(self) -> str:
        return f"CircuitControl(client={self._name!r})"
