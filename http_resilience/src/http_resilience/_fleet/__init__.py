"""The fleet: resilience state shared by replicas through Redis (``redis`` extra).

`SharedState` (state.py), the news a client shares and the fleet's view it
takes (link.py), one fleet variant per strategy (budget.py, breaker.py,
quota.py), the builders that put them in a pipeline (builders.py), and one
sync with Redis (redis_batch.py, running the Lua script sync.lua, with the
counted news of counted.py, through the client of redis_client.py).
"""
