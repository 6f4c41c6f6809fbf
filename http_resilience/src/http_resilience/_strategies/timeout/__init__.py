"""The timeouts: the total timeout and the attempt timeout, on one deadline.

The timeout strategy's folder: `options` (`TimeoutOptions`, its defaults,
what it builds), `deadline` (`Deadline`, the decisions, told the clock's
time), `timer` (`Cut`, the `Deadlines` queue, `DeadlineTimer`, the anyio
scope's `ScopeWait`) and `strategy` (the drivers: `AsyncTimeout`,
`SyncTimeout`, `Narrowing`).

Each timeout (`Deadline`) narrows ``call.deadline`` for what runs inside it to
the earlier of its own and the one around it. A timeout with another inside
it, and nothing between them that waits outside an attempt, does not cut
(`Narrowing`): the inner one cuts at the earlier deadline, and the retry never
waits past one (it ends the call instead), so time passes only in attempts,
and the one cut bounds them (the builder's rule, `Placement.cut`). The cuts of
all attempts share one event-loop timer per transport (`DeadlineTimer`, a
`Deadlines` queue): no ``asyncio.timeout`` stacked per strategy, nor a timer
armed per attempt.

The cut is on the event loop's time, for the time left on the pipeline's
clock. Any clock but the system clock (whose time the loop keeps) is read again
after each attempt, so an attempt that ran past its deadline on a `FakeClock`
times out just the same.

A sync attempt cannot be cut from outside, so it is held to its deadline from
inside: while it runs, the innermost timeout puts the deadline in a
thread-local that the network backend of an `httpx.HTTPTransport` reads at
every connect, read and write (`_sync_deadline`), and a timeout raised there
is this deadline passing. It is checked against the clock afterwards as well.

A wait for a connection from the client's own pool is no time of the host's,
so the attempt's clock starts when the attempt leaves the pool's queue (the
rule Envoy's per-try timeout keeps, started once the pool hands over a
connection): the attempt timeout bounds the host's time, and the wait for a
slot is bounded apart, by the deadline around the attempt's (the total timeout,
a deadline scope) or, with none, by the attempt timeout once more. A wait cut
at that bound never reached the host: a local refusal, `RateLimitedError` with
reason ``"concurrency_limit"`` and a `RejectionEvent`, which the breaker never
counts and the retry never sends into the same full pool; with the pipeline
owning time, an `httpx.PoolTimeout` (the pool's own bound, set `POOL_LEAD`
sooner) is that refusal too. httpcore restarts its pool timeout each time a
queued request is woken and finds the connection taken, so the bound is the
cut's, not httpcore's.

An async attempt learns when it left the queue from httpcore's first trace
event for it (`PoolWait`); a sync one at its first socket operation
(`AttemptDeadline.due`). Either only sees httpx's own transports' pools
(`pool_sweeper`); through any other transport the attempt's clock starts with
the attempt.

On trio (any library but asyncio: `asyncio_loop`), there is no loop timer to
share: each cut is an anyio cancel scope on anyio's clock, its deadline moved
as the `Cut` moves its timer (`ScopeWait`), and a cancellation from outside
passes through it untouched.
"""
