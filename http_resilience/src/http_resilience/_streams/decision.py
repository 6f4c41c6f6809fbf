"""The stream retry decision: retry or not, and after which delay. No I/O.

`with_retry` and `with_retry_sync` are thin loops around `StreamRetryDecision`:
they iterate, close, sleep; this module decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from http_resilience._primitives.backoff import exponential, jitter_factor
from http_resilience._primitives.cancellation import CANCELLATION
from http_resilience._primitives.testing_mode import retries_allowed
from http_resilience._streams.options import PartialStreamPolicy, StreamRetryOptions

__all__ = ["StreamRetryContext", "StreamRetryDecision"]


@dataclass(frozen=True, slots=True)
class StreamRetryContext:
    """What the factory of `with_retry` is told about the stream so far.

    Attributes:
        attempt_number: 1 for the first call of the factory, 2 for the first
            retry, and so on.
        items_yielded: Items the consumer has received so far, over every
            attempt (for `resumable_bytes`, bytes). A source that can skip a
            prefix starts after this many and turns a restart into a
            continuation.
    """

    attempt_number: int
    items_yielded: int


class StreamRetryDecision:
    """Decides, after a failed attempt, whether to retry and how long to wait.

    Built once per `with_retry` call from validated options. Pure but for the
    injected random source.
    """

    __slots__ = (
        "_base",
        "_jitter",
        "_max",
        "_max_retries",
        "_random",
        "_restart",
        "_should_retry",
    )

    def __init__(
        self,
        options: StreamRetryOptions,
        *,
        partial_stream_policy: PartialStreamPolicy | None = None,
        should_retry: Callable[[Exception], bool] | None = None,
    ) -> None:
        policy = partial_stream_policy or options.partial_stream_policy
        self._max_retries = options.max_retry_attempts
        self._base = options.base_delay.total_seconds()
        self._max = options.max_delay.total_seconds()
        self._jitter = options.use_jitter
        self._random = options.random
        self._restart = policy is PartialStreamPolicy.RESTART_FROM_START
        self._should_retry = should_retry or options.should_retry

    @property
    def restarts_mid_stream(self) -> bool:
        """Whether a failure after the first item may be retried."""
        return self._restart

    def delay_before_retry(
        self, attempt_number: int, items_yielded: int, failure: BaseException
    ) -> float | None:
        """Seconds to wait before the next attempt, or None to raise `failure`.

        Args:
            attempt_number: The attempt that failed; 1 for the first.
            items_yielded: Items the consumer received over every attempt.
            failure: What ended the attempt.

        Returns:
            The delay in seconds (0 or more), or None when the failure is
            cancellation, when something was yielded and the policy is
            `RETHROW_MID_STREAM`, when the budget is spent, or when
            `should_retry` declines (asked last, only if all else allows).
        """
        if not isinstance(failure, Exception) or isinstance(failure, CANCELLATION):
            return None
        if items_yielded and not self._restart:
            return None
        if attempt_number > retries_allowed(self._max_retries):
            return None
        if not self._should_retry(failure):
            return None
        return self.delay(attempt_number)

    def delay(self, retry_number: int) -> float:
        """Seconds before retry `retry_number` (1 for the first retry).

        `base_delay * 2 ** (retry_number - 1)`, capped by `max_delay`, then
        scaled by a factor in [0.5, 1) when jitter is on.

        Raises:
            ValueError: If the random source returned a value outside [0, 1).
        """
        delay = exponential(self._base, retry_number, cap=self._max)
        if self._jitter:
            delay *= jitter_factor(self._random(), source="StreamRetryOptions.random")
        return delay
