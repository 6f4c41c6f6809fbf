"""The circuit breaker: a folder, one concept.

`options.py` (`BreakerOptions`, the defaults, the builders), `state.py` (the
state machine, `CircuitBreaker`, told ``now``), `registry.py` (the per-host
breakers, bounded), `strategy.py` (`BreakerStrategy` and its async and sync
drivers) and `control.py` (what an operator told the breakers: isolated hosts,
resets). No other strategy imports this folder, and it imports none.
"""
