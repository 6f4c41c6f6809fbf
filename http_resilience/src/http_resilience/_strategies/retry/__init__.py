"""The retry, a folder of four: options, decision, strategy and its loops.

`options.py`: `RetryOptions`, its defaults, and how it builds the strategy;
`decision.py`: `RetryDecision`, pure (told `now`); `strategy.py`:
`RetryStrategy`, what the loops ask; `drive.py`: `AsyncRetry`, the async loop
(its sync twin `drive_sync.py`, `SyncRetry`, is generated).
"""
