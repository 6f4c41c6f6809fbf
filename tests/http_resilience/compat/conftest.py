"""The compatibility tests' fixtures: both async backends, and their server."""

from __future__ import annotations

import pytest

from tests.http_resilience.compat.server import compat_server

__all__ = ["anyio_backend", "compat_server"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test here runs on asyncio and on trio."""
    backend: str = request.param
    return backend
