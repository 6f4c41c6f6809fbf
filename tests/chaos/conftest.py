"""Every test under tests/chaos carries the `chaos` marker.

`make test` leaves them out (``-m "not chaos"``) and `make chaos` runs them, so
the everyday suite stays fast while CI runs both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.chaos)
