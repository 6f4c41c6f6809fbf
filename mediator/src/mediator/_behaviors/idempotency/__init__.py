"""`@idempotent` and `IdempotencyBehavior`: key, options, store protocols, outcomes.

`behavior` resolves what a send needs; `flow` decides the send without I/O and
`drive` (with its generated twin `drive_sync`) runs it. `completion` holds the
claims of a request scope, a participant of its transaction (see
`mediator._core.scope`).
"""
