"""`mediator.idempotency`: the store contract, the same objects as at the root."""

from __future__ import annotations

import mediator
import mediator.idempotency


def test_the_store_contract_is_its_own_namespace() -> None:
    assert mediator.idempotency.__all__ == [
        "AsyncIdempotencyStore",
        "Claim",
        "IdempotencyStore",
        "StoredOutcome",
    ]


def test_its_names_are_the_root_objects() -> None:
    for name in mediator.idempotency.__all__:
        assert getattr(mediator.idempotency, name) is getattr(mediator, name)
        assert getattr(mediator, name).__module__ == "mediator"
