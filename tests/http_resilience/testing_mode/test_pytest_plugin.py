"""The pytest plugin, seen from a user's test suite (pytester runs one)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import httpx
import pytest

from http_resilience import (
    HttpResilienceOptions,
    ResilientTransport,
    RetryEvent,
    SystemClock,
)
from http_resilience.testing import is_testing


class CountingClock(SystemClock):
    """The real clock, keeping what it was asked to sleep."""

    def __init__(self):
        self.asked = []

    def sleep_sync(self, seconds):
        self.asked.append(seconds)
        super().sleep_sync(seconds)


def test_a_fake_clock_takes_the_backoff(
    http_fake_clock, http_events, scripted_transport
):
    server = scripted_transport(503, 503, 503, 200)
    transport = ResilientTransport(
        server, clock=http_fake_clock, listeners=[http_events], random=lambda: 0.0
    )
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.example/").status_code == 200
    assert server.hits == 4
    assert http_fake_clock.sleeps == [1.0, 2.0, 4.0]
    assert [e.attempt for e in http_events.of(RetryEvent)] == [1, 2, 3]


def test_testing_mode_makes_a_real_clock_wait_nothing(
    http_testing_mode, http_events, scripted_transport
):
    # 2 s, 4 s and 8 s of backoff on the real clock, were it not for testing mode.
    clock = CountingClock()
    server = scripted_transport(503, 503, 503, 200)
    options = HttpResilienceOptions(base_delay="2s", total_request_timeout="60s",
                                    attempt_timeout="10s", sampling_duration="60s")
    transport = ResilientTransport(
        server, options=options, clock=clock, listeners=[http_events],
        random=lambda: 0.999,
    )
    assert is_testing()
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.example/").status_code == 200
    assert server.hits == 4
    assert clock.asked == [0.0, 0.0, 0.0]
    assert len(http_events.of(RetryEvent)) == 3


def test_the_mode_ends_with_the_test_that_asked_for_it():
    assert not is_testing()


def test_each_test_gets_fresh_fixtures(http_fake_clock, http_events):
    assert http_fake_clock.now == 0.0 and http_fake_clock.sleeps == []
    assert http_events.events == []
'''


def test_the_fixtures_work_in_a_users_test_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_loading_the_plugin_imports_nothing_of_the_package(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_user="""
        import sys

        def test_nothing_imported():
            assert "http_resilience" not in sys.modules
        """
    )
    # A fresh interpreter: this one imported the package long ago.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:anyio")
    result.assert_outcomes(passed=1)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        def test_uses_the_clock(http_fake_clock):
            pass
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:http_resilience"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'http_fake_clock' not found*"])
