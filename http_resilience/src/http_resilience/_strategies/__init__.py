"""The strategies, one module each: options, defaults, decision and strategy.

Retry, retry budget, circuit breaker (with its per-host registry and its
operator state, `breaker/control.py`), timeout (with its deadlines), concurrency
limiter, rate limiter, published quota and hedging. Each strategy's options
build its async and its sync driver (hedging: async only) over one decision,
for the builder in `http_resilience._core.builder`. No strategy imports
another: what two of them need lives in `http_resilience._core`. The pipelines
that compose them are in `http_resilience._pipelines`.
"""
