"""The retry, a folder of three: options, decision and strategy.

`options.py`: `RetryOptions`, its defaults, and how it builds the strategy;
`decision.py`: `RetryDecision`, pure (told `now`); `strategy.py`:
`RetryStrategy` with its async and sync loops.
"""
