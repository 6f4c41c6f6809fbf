"""The idempotency store's contract, for those who write a store.

`IdempotencyBehavior` claims each ``@idempotent`` send's key in the bound
store, then completes, finishes or releases the claim: `AsyncIdempotencyStore`
on the async path, `IdempotencyStore` on the sync one. A store answers a
`Claim` and keeps each outcome as a `StoredOutcome`. `mediator.sqlalchemy`
ships one on SQLite and PostgreSQL; these names are also exported by
`mediator` itself.

Example:
    >>> from mediator.idempotency import Claim
    >>> Claim("in_flight").token is None
    True
"""

from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    Claim,
    IdempotencyStore,
    StoredOutcome,
)

__all__ = [
    "AsyncIdempotencyStore",
    "Claim",
    "IdempotencyStore",
    "StoredOutcome",
]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
