"""The strategies, one module each: options, defaults, decision and strategy.

Retry, circuit breaker (with its per-host registry), timeout (with its
deadlines), concurrency limiter and hedging. Each strategy's options build its
async and its sync driver (hedging: async only) over one decision, for the
builder in `http_resilience._core.builder`. `pipeline` holds the fluent
`ResiliencePipeline`; `standard` holds the flat `HttpResilienceOptions` of the
standard pipeline, which takes its defaults from the strategies and is the
builder's preset (`standard_steps`).
"""
