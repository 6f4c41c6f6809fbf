"""Shared pytest set-up: async tests run under anyio's plugin on asyncio.

A test module with coroutine tests sets ``pytestmark = pytest.mark.anyio``.
"""

from __future__ import annotations

import pytest

from tests.support.fault_proxy import fault_proxy
from tests.support.fault_server import fault_server
from tests.support.postgres import postgres_url
from tests.support.redis_server import redis_server, redis_session

__all__ = [
    "fault_proxy",
    "fault_server",
    "postgres_url",
    "redis_server",
    "redis_session",
]


@pytest.fixture
def anyio_backend() -> str:
    """The mediator is asyncio-based; http_resilience tests may add trio."""
    return "asyncio"
