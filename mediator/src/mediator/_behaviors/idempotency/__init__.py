"""`@idempotent` and `IdempotencyBehavior`: key, store protocols, outcomes, fingerprint.

`completion` holds the claims of a request scope, a participant of its
transaction (see `mediator._core.scope`).
"""
