"""`set_testing`: one switch that makes a test suite's retries instant.

With testing mode on, every retry still happens, and is still decided,
reported and logged as usual (the events carry the delay the policy chose),
but the wait before it is zero: the clock is asked to sleep 0 s, so an async
retry still yields to the event loop once, and a cancellation still lands
between attempts. `attempts` may also cap the attempts of every call. The
retry loops read the switch only after a failure, so a call that succeeds
pays nothing for it.

The packages may not import each other, so each keeps a copy of this module,
written by tools/copy_primitives.py from tools/primitives/testing_mode.py:
each package has a switch of its own.
"""

from __future__ import annotations

from typing import ClassVar, Final, final

__all__ = [
    "TESTING",
    "TestingScope",
    "TestingSwitch",
    "is_testing",
    "retries_allowed",
    "set_testing",
    "testing_wait",
]


@final
class TestingSwitch:
    """The process-wide state `set_testing` writes and the retry loops read.

    Attributes:
        on: Whether testing mode is on.
        attempts: The cap on the attempts of a call (the first one included)
            while testing mode is on; None: the configured attempts.
    """

    __slots__ = ("attempts", "on")
    __test__: ClassVar[bool] = False

    def __init__(self) -> None:
        self.on = False
        self.attempts: int | None = None


TESTING: Final = TestingSwitch()
"""The package's one switch."""


@final
class TestingScope:
    """What `set_testing` returns: a `with` block restores the mode it replaced.

    Used without `with`, the mode stays set until the next `set_testing`.
    """

    __slots__ = ("_previous",)
    # Imported into a test module, a class named Test... is no test to collect.
    __test__: ClassVar[bool] = False

    def __init__(self, previous: tuple[bool, int | None]) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        TESTING.on, TESTING.attempts = self._previous

    def __repr__(self) -> str:
        on, attempts = self._previous
        return f"TestingScope(restores testing={on!r}, attempts={attempts!r})"


def set_testing(testing: bool, *, attempts: int | None = None) -> TestingScope:
    """Turn testing mode on or off, for the whole process.

    On, every retry of this package waits 0 s instead of its backoff (the
    clock's sleep is still called, with 0), and with `attempts` no call makes
    more than `attempts` attempts in all (the first included); a policy that
    allows fewer keeps its own number. Everything else (what is retried,
    events, logs, deadlines) is as in production.

    Args:
        testing: True to turn testing mode on, False to turn it off.
        attempts: While on, at most this many attempts per call, at least 1
            (1: no retries at all); None (the default) keeps each policy's own.

    Returns:
        A context manager: ``with set_testing(True): ...`` restores the mode
        that was set before when the block ends. Called as a plain function,
        the mode stays until changed.

    Raises:
        ValueError: `attempts` is below 1, or given with `testing` False.
        TypeError: `attempts` is not an int (True and False are refused).

    Example:
        >>> with set_testing(True, attempts=2):
        ...     is_testing()
        True
        >>> is_testing()
        False
    """
    if attempts is not None:
        if isinstance(attempts, bool) or not isinstance(attempts, int):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"attempts must be an int or None, got {type(attempts).__name__}"
            )
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        if not testing:
            raise ValueError("attempts caps the attempts only with testing=True")
    scope = TestingScope((TESTING.on, TESTING.attempts))
    TESTING.on, TESTING.attempts = bool(testing), attempts
    return scope


def is_testing() -> bool:
    """Whether testing mode is on."""
    return TESTING.on


def testing_wait(delay: float) -> float:
    """The wait a retry makes for a backoff of `delay` s: 0 in testing mode."""
    return 0.0 if TESTING.on else delay


def retries_allowed(configured: int) -> int:
    """The retries after the first attempt a policy of `configured` may make.

    `configured`, or fewer while testing mode caps the attempts.
    """
    cap = TESTING.attempts
    if cap is None or not TESTING.on:
        return configured
    return min(configured, cap - 1)
