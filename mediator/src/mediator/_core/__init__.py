"""What every behavior and the dispatch stand on; names no behavior.

Requests and handlers, the behavior protocol and its stages, errors, clocks,
the request context (principal, correlation id, replay flag), the request
scope (with the unit-of-work flag and the transaction's participants), the
wiring, worker threads, record fields and class markers.
"""
