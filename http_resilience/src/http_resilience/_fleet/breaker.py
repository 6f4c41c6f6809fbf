"""The fleet's breaker: a local breaker, behind the fleet's view of open hosts.

A local breaker that opens is published at once (`ClientShare.moved`). A
host the fleet holds open is refused until its break is over; then exactly
one replica, the one whose claim Redis granted, sends the probe, and its
outcome closes or reopens the host for all (`ClientShare.probed`).

`breaker_strategy` builds the first breaker step of a linked transport (a
later one stays local); `AsyncSharedBreaker` and `SyncSharedBreaker` drive
it, asking `fleet_probe` first.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.classify import is_classified_failure
from http_resilience._core.drive import Driver
from http_resilience._core.errors import BrokenCircuitError
from http_resilience._core.host_registry import ALL_HOSTS
from http_resilience._strategies.breaker.strategy import (
    AsyncBreaker,
    BreakerStrategy,
    SyncBreaker,
)

if TYPE_CHECKING:
    from http_resilience._core.builder import BuildContext
    from http_resilience._fleet.link import ClientShare
    from http_resilience._strategies.breaker.options import BreakerOptions

__all__ = [
    "AsyncSharedBreaker",
    "SyncSharedBreaker",
    "breaker_strategy",
    "fleet_probe",
    "probe_raised",
]

H = TypeVar("H")


def breaker_strategy(
    share: ClientShare, options: BreakerOptions, context: BuildContext
) -> BreakerStrategy | None:
    """The breakers the fleet holds open too; None for a second breaker step."""
    if share.break_duration:
        return None  # a second breaker step stays local
    share.break_duration = options.break_duration.total_seconds()
    share.breakers = BreakerStrategy(
        options=options,
        clock=context.clock,
        telemetry=context.telemetry,
        on_transition=share.moved,
    )
    return share.breakers


def fleet_probe(
    strategy: BreakerStrategy, share: ClientShare, call: Call
) -> str | None:
    """The host's key when `call` is the fleet's probe of it; else None.

    None also when the fleet holds nothing open for the host, or an operator
    isolated it here (the local breaker refuses it, and says so).

    Raises:
        BrokenCircuitError: The fleet holds the host open, or another replica
            (or another call) probes it (`ClientShare.admit`).
    """
    if not share.open_hosts:
        return None
    key = call.host if strategy.registry is not None else ALL_HOSTS
    if key in strategy.manual.isolated:
        return None
    fleet = share.open_hosts.get(key)
    if fleet is None or not share.admit(key, fleet, call, strategy.telemetry):
        return None
    return key


def probe_raised(
    strategy: BreakerStrategy, share: ClientShare, key: str, exc: BaseException
) -> None:
    """The fleet's probe of `key` raised `exc`: a failure reopens it for all.

    A refusal or an exception that is no evidence against the host tells the
    fleet nothing; the claim runs out, and another probe is sent.
    """
    if isinstance(exc, BrokenCircuitError):
        return
    if isinstance(exc, Exception) and is_classified_failure(
        exc, strategy.failed, strategy.options.should_break
    ):
        share.probed(key, True)


class _SharedBreaker(Driver[H, BreakerStrategy]):
    """What both shared breakers hold: the transport's link to the fleet.

    The slot is each subclass's: the sync breaker has slots of its own, and
    two bases with slots cannot be combined.
    """

    __slots__ = ()
    _share: ClientShare

    def __init__(self, next: H, strategy: BreakerStrategy, share: ClientShare) -> None:
        super().__init__(next, strategy)
        # mypy reads only this class's (empty) slots; each subclass has `_share`.
        self._share = share  # type: ignore[misc]

    @property
    def share(self) -> ClientShare:
        """The transport's link to its `SharedState`."""
        return self._share


@contextmanager
def _probing(
    strategy: BreakerStrategy, share: ClientShare, call: Call
) -> Generator[Callable[[httpx.Response], httpx.Response]]:
    """Around one attempt: its outcome, if it is the fleet's probe, told to all.

    Entered, it refuses a host the fleet holds open (`fleet_probe`). An
    exception the attempt raises goes to `probe_raised`; its answer, passed
    through the function it gives, to `ClientShare.probed`.
    """
    key = fleet_probe(strategy, share, call)

    def answered(response: httpx.Response) -> httpx.Response:
        nonlocal key
        probe, key = key, None  # told once; what follows is not the attempt's
        if probe is not None:
            share.probed(probe, strategy.is_failure(response))
        return response

    try:
        yield answered
    except BaseException as exc:
        if key is not None:
            probe_raised(strategy, share, key, exc)
        raise


class AsyncSharedBreaker(_SharedBreaker[AsyncHandler], AsyncBreaker):
    """`AsyncBreaker`, behind the fleet's view of which hosts are open."""

    __slots__ = ("_share",)

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host the fleet holds open; else as `AsyncBreaker`."""
        with _probing(self.strategy, self._share, call) as answered:
            return answered(await AsyncBreaker.handle(self, request, call))


class SyncSharedBreaker(_SharedBreaker[SyncHandler], SyncBreaker):
    """`SyncBreaker`, behind the fleet's view of which hosts are open."""

    __slots__ = ("_share",)

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host the fleet holds open; else as `SyncBreaker`."""
        with _probing(self.strategy, self._share, call) as answered:
            return answered(SyncBreaker.handle_sync(self, request, call))
