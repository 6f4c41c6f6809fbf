"""`SharedState` refuses a bad argument when it is built, naming it.

Nothing here reaches Redis: the checks run before any connection is made, and
the one sync tried is refused at once (nothing listens on port 1).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from http_resilience import SharedState

URL = "redis://127.0.0.1:1/0"  # never contacted


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sync_interval": -1}, "sync_interval must be above 0 and finite"),
        ({"sync_interval": 0}, "sync_interval must be above 0 and finite"),
        ({"sync_interval": float("nan")}, "sync_interval must be above 0 and finite"),
        ({"sync_interval": float("inf")}, "sync_interval must be above 0 and finite"),
        ({"fallback": "closed"}, "fallback must be 'local'"),
        ({"maximum_batch": 0}, "maximum_batch must be at least 1"),
        ({"maximum_hosts": 0}, "maximum_hosts must be at least 1"),
        ({"namespace": ""}, "namespace must be 1 to 64"),
        ({"namespace": "a b"}, "namespace must be 1 to 64"),
        ({"namespace": "{tag}"}, "namespace must be 1 to 64"),
        ({"namespace": "a:b"}, "namespace must be 1 to 64"),
        ({"namespace": "n" * 65}, "namespace must be 1 to 64"),
        ({"namespace": 7}, "namespace must be 1 to 64"),
    ],
)
def test_a_bad_argument_is_refused_when_built(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SharedState(URL, **values)


def test_a_namespace_of_plain_characters_is_taken() -> None:
    state = SharedState(URL, namespace="orders-api.v2_eu")
    try:
        assert state.namespace == "orders-api.v2_eu"
    finally:
        state.close()


def test_something_that_is_no_redis_is_refused() -> None:
    with pytest.raises(TypeError):
        SharedState(object())


def sync_threads() -> list[threading.Thread]:
    return [
        thread
        for thread in threading.enumerate()
        if thread.name == "http_resilience-shared"
    ]


def test_without_background_no_thread_syncs_and_attaching_starts_none() -> None:
    before = sync_threads()
    state = SharedState(URL, background=False)
    try:
        state.attach("inventory")
        assert sync_threads() == before
        # The owner syncs: Redis is not there, so the sync says so.
        assert state.sync_now() is False
        assert state.up is False
    finally:
        state.close()
