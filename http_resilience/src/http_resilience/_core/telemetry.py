"""`Telemetry`: the pipeline's events, to listeners and the ``http_resilience`` log.

Events name a request by client, method and normalised host only; log lines
say the same, and a failure by its type name, never its message: header
values, bodies, URL userinfo and query strings never reach either.

Every log record also carries these as attributes (``extra``), for a
formatter or a structured handler: ``resilience_event`` (``"attempt"``,
``"retry"``, ``"hedge"``, ``"breaker"``, ``"baseline"``,
``"concurrency_limit"``, ``"nested_retry"``, ``"rejection"``, ``"timeout"``,
``"degraded"``), ``resilience_client``, ``resilience_method`` (None for a
breaker, a baseline or a limit), ``resilience_host``, ``correlation_id`` (the
call's, or None), and per kind ``resilience_attempt``,
``resilience_delay_s``, ``resilience_reason``, ``resilience_duration_s``,
``resilience_state``, ``resilience_previous_state``, ``resilience_p50_s``,
``resilience_p95_s``, ``resilience_error_rate``, ``resilience_limit``,
``resilience_previous_limit`` and ``resilience_source``. A wait reads
``retrying in 1.250 s`` in every package.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final, Literal

import httpx

from http_resilience._core import events
from http_resilience._core.correlation import (
    CORRELATION_EXTENSION,
    current_correlation_id,
)
from http_resilience._core.degraded import DegradationSource
from http_resilience._core.events import (
    OPEN,
    BreakerState,
    HttpEvent,
    HttpEventListener,
    RejectionReason,
    RequestEvent,
    TripRule,
)

__all__ = ["LOGGER", "Telemetry", "correlation_of"]

LOGGER = logging.getLogger("http_resilience")
"""Where the pipeline logs: retries and timeouts at WARNING, hedges at INFO, a
breaker opening at WARNING and its other transitions at INFO, a baseline's
changes at INFO, a degraded answer (stale or a fallback's) at WARNING,
attempts, rejections and adaptive limits at DEBUG."""


_LINES: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "attempt": (
        "attempt %d ended with %s after %.3f s",
        ("resilience_attempt", "resilience_reason", "resilience_duration_s"),
    ),
    "retry": (
        "attempt %d failed with %s; retrying in %.3f s",
        ("resilience_attempt", "resilience_reason", "resilience_delay_s"),
    ),
    "hedge": (
        "sending hedged attempt %d after %.3f s (%s)",
        ("resilience_attempt", "resilience_delay_s", "resilience_reason"),
    ),
    "breaker": (
        "circuit breaker %s -> %s",
        ("resilience_previous_state", "resilience_state"),
    ),
    "nested_retry": (
        "failed while the caller retries (its attempt %d); %s",
        ("resilience_attempt", "resilience_reason"),
    ),
    "baseline": (
        "baseline %s: p50 %.3f s, p95 %.3f s, error rate %.3f",
        (
            "resilience_reason",
            "resilience_p50_s",
            "resilience_p95_s",
            "resilience_error_rate",
        ),
    ),
    "concurrency_limit": (
        "adaptive concurrency limit %d -> %d",
        ("resilience_previous_limit", "resilience_limit"),
    ),
    "rejection": ("refused, %s", ("resilience_reason",)),
    "degraded": (
        "answered from the %s in place of %s",
        ("resilience_source", "resilience_reason"),
    ),
    "timeout": (
        "%s timeout after %.3f s",
        ("resilience_reason", "resilience_duration_s"),
    ),
}
"""Each event's log line (after the call's name) and the attributes its
arguments become, in their order."""


class Telemetry:
    """One client's reporter: builds each event only when someone will read it.

    A listener that raises is logged (at ERROR) and does not break the call.

    Args:
        client: The client's name, carried by every event.
        listeners: Called with every event, synchronously, in order.
    """

    __slots__ = ("client", "listeners")

    def __init__(
        self, client: str, listeners: Sequence[HttpEventListener] = ()
    ) -> None:
        self.client = client
        self.listeners = tuple(listeners)

    @property
    def wants_attempts(self) -> bool:
        """Whether an `AttemptEvent` has a reader (a listener, or DEBUG logging)."""
        return bool(self.listeners) or LOGGER.isEnabledFor(logging.DEBUG)

    def attempt(
        self, method: str, host: str, attempt: int, outcome: str, duration: float
    ) -> None:
        """One physical attempt ended with `outcome` after `duration` seconds."""
        self._log(logging.DEBUG, "attempt", method, host, (attempt, outcome, duration))
        if self.listeners:
            self._emit(
                events.AttemptEvent(
                    self.client, method, host, attempt, outcome, duration
                )
            )

    def retry(
        self,
        method: str,
        host: str,
        attempt: int,
        delay: float,
        reason: str,
        correlation: str | None = None,
    ) -> None:
        """Attempt `attempt` failed with `reason`; the next follows in `delay` s.

        `correlation`: the id the call carries, if known (`correlation_of`).
        """
        args = (attempt, reason, delay)
        self._log(logging.WARNING, "retry", method, host, args, correlation)
        if self.listeners:
            self._emit(
                events.RetryEvent(self.client, method, host, attempt, delay, reason)
            )

    def hedge(
        self, method: str, host: str, attempt: int, after: float, reason: str
    ) -> None:
        """Hedged attempt `attempt` is sent `after` seconds into the call."""
        self._log(logging.INFO, "hedge", method, host, (attempt, after, reason))
        if self.listeners:
            self._emit(
                events.HedgeEvent(self.client, method, host, attempt, after, reason)
            )

    def breaker(self, host: str, previous: BreakerState, current: BreakerState) -> None:
        """The breaker of `host` went from `previous` to `current`."""
        level = logging.WARNING if current == OPEN else logging.INFO
        self._log(level, "breaker", None, host, (previous, current))
        if self.listeners:
            self._emit(events.BreakerEvent(self.client, host, previous, current))

    def baseline(
        self,
        host: str,
        armed: bool,
        quantiles: tuple[float, float],
        error_rate: float,
        failure_threshold: float,
        attempt_timeout: float | None,
        tripped: TripRule | None,
        *,
        moved: bool = False,
    ) -> None:
        """The baseline of `host` armed, was disarmed, or moved its attempt cap.

        `tripped`: the rule whose trip disarmed it; `moved`: only the attempt
        timeout it sets moved, while armed.
        """
        if tripped is not None:
            said = f"disarmed ({tripped} opened the breaker)"
        elif moved:
            said = f"moved the attempt timeout to {attempt_timeout:.3f} s"
        else:
            said = "armed" if armed else "disarmed"
        p50, p95 = quantiles
        self._log(logging.INFO, "baseline", None, host, (said, p50, p95, error_rate))
        if self.listeners:
            self._emit(
                events.BaselineEvent(
                    self.client,
                    host,
                    armed,
                    p50,
                    p95,
                    error_rate,
                    failure_threshold,
                    attempt_timeout,
                    tripped,
                )
            )

    def concurrency_limit(self, host: str, previous: int, limit: int) -> None:
        """The adaptive concurrency limit of `host` moved from `previous` to `limit`."""
        self._log(logging.DEBUG, "concurrency_limit", None, host, (previous, limit))
        if self.listeners:
            self._emit(events.ConcurrencyLimitEvent(self.client, host, previous, limit))

    def nested(
        self, method: str, host: str, caller_attempt: int, suppressed: bool
    ) -> None:
        """A call failed while its caller retries; `suppressed`: no retry here."""
        told = "not retried here" if suppressed else "retried here as well"
        self._log(
            logging.INFO,
            "nested_retry",
            method,
            host,
            (caller_attempt, told),
            values=(caller_attempt, "suppressed" if suppressed else "reported"),
        )
        if self.listeners:
            self._emit(
                events.NestedRetryEvent(
                    self.client, method, host, caller_attempt, suppressed
                )
            )

    def rejection(self, method: str, host: str, reason: RejectionReason) -> None:
        """A request was refused before sending."""
        self._log(logging.DEBUG, "rejection", method, host, (reason,))
        if self.listeners:
            self._emit(events.RejectionEvent(self.client, method, host, reason))

    def degraded(
        self, method: str, host: str, source: DegradationSource, reason: str
    ) -> None:
        """The call failed with `reason`; `source` answered in its place.

        Logged only: listeners read it on the call's `RequestEvent`.
        """
        self._log(logging.WARNING, "degraded", method, host, (source, reason))

    def timeout(
        self, method: str, host: str, kind: Literal["attempt", "total"], after: float
    ) -> None:
        """An attempt, or the whole call, ran out of time after `after` seconds."""
        self._log(logging.WARNING, "timeout", method, host, (kind, after))
        if self.listeners:
            self._emit(events.TimeoutEvent(self.client, method, host, kind, after))

    def request(self, event: RequestEvent) -> None:
        """A logical call ended; to listeners only (attempts are what is logged)."""
        self._emit(event)

    def _log(
        self,
        level: int,
        event: str,
        method: str | None,
        host: str,
        args: tuple[object, ...],
        correlation: str | None = None,
        values: tuple[object, ...] | None = None,
    ) -> None:
        """Log `event`'s line (`_LINES`) after ``METHOD host (client 'name'):``.

        `args` fill the line's placeholders and, unless `values` are given
        instead, its attributes (``extra``) in `_LINES`' order; they are built
        only when `level` is logged; see the module's docstring.
        """
        if not LOGGER.isEnabledFor(level):
            return
        message, fields = _LINES[event]
        named: tuple[str, ...]
        if method is None:  # a breaker's line: per host, not per call
            message, named = f"%s (client %r): {message}", (host, self.client)
        else:
            message = f"%s %s (client %r): {message}"
            named = (method, host, self.client)
        extra: dict[str, object] = {
            "resilience_event": event,
            "resilience_client": self.client,
            "resilience_method": method,
            "resilience_host": host,
            "correlation_id": correlation or current_correlation_id(),
        }
        extra.update(zip(fields, args if values is None else values, strict=True))
        # The record names the method that reports, as one logged by it.
        LOGGER.log(level, message, *named, *args, extra=extra, stacklevel=2)

    def _emit(self, event: HttpEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                LOGGER.exception(
                    "an http_resilience event listener raised on %s",
                    type(event).__name__,
                )


def correlation_of(request: httpx.Request) -> str | None:
    """The correlation id `request`'s call carries, if any.

    The one a factory's client chose on the call's first attempt, else the
    innermost `http_resilience.correlation_id` block's.
    """
    chosen = request.extensions.get(CORRELATION_EXTENSION)
    return chosen if isinstance(chosen, str) else current_correlation_id()
