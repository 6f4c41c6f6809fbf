"""`HedgingStrategy`: a second attempt beside a slow first, the first good answer wins.

Hedging is the alternative to retry for tail latency: where the retry waits for
an attempt to fail, hedging sends another copy while the first is still in
flight, and takes whichever answers well first. Each attempt runs in a task of
its own, with its own copy of the `Call`, so the strategies inside (a timeout,
a breaker) see one attempt each; the losers' tasks are cancelled and their
responses closed before the winner is returned.

The delay is spent on the pipeline's clock. Before arming it the strategy
gives a fresh attempt one turn of the event loop, so an attempt that answers
at once (a cache, a `MockTransport`) never starts a timer.

On asyncio the attempts and the timer are asyncio tasks; on trio (any library
but asyncio: `asyncio_loop`) they run in an anyio task group, each in a cancel
scope of its own (`GroupTasks`), which the call leaves only once they ended.

`options.py`: `HedgingOptions` and its defaults; `decision.py`: which
requests are hedged and what a refused copy raises, pure; `strategy.py`:
`HedgingStrategy`, the race; `tasks.py`: where the race runs its attempts
(asyncio tasks, or an anyio task group).
"""
