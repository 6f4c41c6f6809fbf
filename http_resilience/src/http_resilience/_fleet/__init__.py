"""The fleet: resilience state shared by replicas through Redis (``redis`` extra).

`SharedState` (state.py), the news a client shares and the fleet's view it
takes (link.py, quota.py), the builders that put the fleet's breaker, budget
and quota in a pipeline (builders.py), and one sync with Redis (redis_batch.py,
running the Lua script sync.lua).
"""
