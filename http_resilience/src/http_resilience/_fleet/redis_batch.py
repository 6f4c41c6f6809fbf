"""One sync of one `ClientShare` with Redis: a single Lua script call (``redis``).

With `http_resilience._fleet.redis_client` (the client and the keys), the
only module that imports ``redis``; `SharedState` imports both when made. The
counted news it sends is read by `http_resilience._fleet.counted`.

Keys, per client (``{namespace}:{<client>}:budget``, ``...:breakers``,
``...:quota`` and ``...:replicas``; the braces keep a client's keys in one
Redis Cluster slot): four hashes, one field per host (per replica for the
last), each at most `maximum_hosts` fields, each with a TTL renewed by every
sync (two budget windows; two break durations and a second; the latest quota
window's end and a second; `MEMORY` for the replicas). A field that does not
parse (another program's value, a truncated write) is dropped and written
afresh; a key of another type is deleted.

A sync can be repeated without counting twice. The counted news (the budget
and quota rows: first attempts, unused leases handed back, requests sent
unleased, leases wanted) goes in a numbered batch (per replica: each link has
a random id), sent again, the same, until an answer comes back; news that
comes meanwhile waits for the next batch. The script remembers, per replica,
the number of the last batch it applied and the leases it granted in it (for
`MEMORY`); a batch not newer than that is not applied again, and is answered
with those leases (and the quotas' and breakers' state now). So a sync whose
script ran but whose answer was lost (a slow Redis, past the socket timeout)
counts once, and the leases it granted are received by the retry. A batch
unanswered for `RESEND_FOR` is dropped: Redis may have forgotten it by then.
Breaker news is not numbered: it goes out with whichever call comes next.

The script (`sync.lua`, beside this module), given the fleet's time
(``now``, Unix milliseconds) and this replica's news (the counted part only if
the batch is new, see above):

- budget: for each host, adds the first attempts counted since the last
  sync, takes back the leased retries this replica did not spend, and
  leases it up to ``want`` retries out of what the fleet's window allows
  (``ratio x first attempts + min_per_second x seconds``, the floor accruing
  from the host's first sync, as the local budget's does); a lease counts as
  spent at once, so every replica together stays within one budget.
- breakers: applies the openings, closings and probe claims (a claim is
  granted to one replica only, once the break is over and no live claim is
  held), forgets a host whose break has been over for a further break with
  no claim, and returns what is left.
- quota: for each host, takes back the leases this replica did not spend,
  applies the quota it saw (a new window replaces the allowance; the same
  window can only lower it, as when another program spends the account
  too), takes off the requests it sent unleased (before it knew the fleet's
  view; those the quota seen counts already are taken twice: the error is on
  the safe side), forgets a window that has ended, and leases up to ``want``
  requests out of the allowance left; it answers the window's end and what
  is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from typing import Final

import redis

from http_resilience._core.quota_headers import MAX_RESET
from http_resilience._fleet.counted import CountedBatch, counted
from http_resilience._fleet.link import PROBE_OP, ClientShare, FleetBreak
from http_resilience._fleet.redis_client import client_keys

__all__ = [
    "LEASE_HOLD",
    "MEMORY",
    "RESEND_FOR",
    "SCRIPT",
    "RedisBatch",
]

# How long the script remembers a replica's last batch (seconds), and how long
# a replica sends an unanswered batch again: well within it, so a batch is
# never applied twice for want of memory (the replicas' clocks agree closely).
MEMORY: Final = 60.0
RESEND_FOR: Final = 45.0

# How long a replica keeps leases it has not spent: long enough that one
# calling a host once a second still holds them when its next call comes.
LEASE_HOLD: Final = 5.0

# A quota seen with a reset later than the window Redis holds by more than this
# is a new window (a reset is given in whole seconds, so it jitters by one).
_NEW_WINDOW_MS: Final = 1500

# The script, `sync.lua` beside this module (shipped in the wheel), read once.
# (`__package__` spelled from `__name__`: typed `str`, never None.)
_PACKAGE: Final = __name__.rpartition(".")[0]
SCRIPT: Final = files(_PACKAGE).joinpath("sync.lua").read_text(encoding="utf-8")


class RedisBatch:
    """Syncs shares through one registered script; raises when Redis fails.

    Args:
        client: A sync ``redis.Redis``.
        namespace: The keys' first part.
        maximum_batch: The most budget hosts and breaker news sent at once,
            and the most retries leased per host and sync.
        maximum_hosts: The fields a client's hash holds at most.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        maximum_batch: int,
        maximum_hosts: int,
    ) -> None:
        self.client = client
        self._script = client.register_script(SCRIPT)
        self._namespace = namespace
        self._batch = maximum_batch
        self._hosts = maximum_hosts

    def sync(self, share: ClientShare, now: float) -> None:
        """Send `share`'s news; take the fleet's view. Raises on any failure.

        The counted news not answered yet (`share.pending`) is sent again as
        it was; else what came since the last batch, in a new one.

        Raises:
            redis.RedisError: Redis failed or is away.
            ValueError: Its answer is not what the script returns.
        """
        batch = share.pending
        if batch is not None and now - batch.since > RESEND_FOR:
            # Redis may have forgotten it: dropped, not risked twice.
            batch = share.pending = None
        if batch is None:
            batch = counted(share, now, self._batch)
            share.pending = batch if batch.sequence else None
        terms = share.budget_terms
        if share.lost:
            # Back after an outage: what opened meanwhile is news again.
            share.lost = False
            share.outbox.extend(share.reopened())
        ops: list[tuple[str, str, float]] = []
        outbox = share.outbox
        while outbox and len(ops) < self._batch:
            ops.append(outbox.popleft())
        # Orders renewed at every sync (an operator's isolation, a probe due
        # now): not put back in the outbox when the sync fails.
        standing = share.standing(now)[: max(self._batch - len(ops), 0)]
        args: list[str | int | float] = [
            int(now * 1000),
            share.token,
            self._hosts,
            int(terms.window * 1000) if terms is not None else 0,
            terms.ratio if terms is not None else 0,
            terms.min_per_second if terms is not None else 0,
            int(share.break_duration * 1000),
            len(batch.budgets),
            len(ops) + len(standing),
            len(batch.quotas),
            _NEW_WINDOW_MS,
            share.replica,
            batch.sequence,
            int(MEMORY * 1000),
            int(MAX_RESET * 1000),
        ]
        for host, _, deposits, unused, want in batch.budgets:
            args += [host, deposits, unused, want]
        for op, host, when in ops + standing:
            args += [op, host, int(when * 1000)]
        for host, _, observed, unused, unleased, want in batch.quotas:
            left, reset = observed if observed is not None else (-1, 0.0)
            args += [host, left, int(reset * 1000), unused, unleased, want]
        try:
            answer = self._script(
                keys=list(client_keys(self._namespace, share.name)), args=args
            )
            grants, view, leased = _parse(answer)
            _check(batch, grants, leased)
        except BaseException:
            # Breaker news is kept for the next try; only probe claims go stale.
            # The counted news stays pending: sent again, the same.
            outbox.extendleft(reversed([op for op in ops if op[0] != PROBE_OP]))
            raise
        share.pending = None
        # What Redis says is advice, bounded here as the script bounds it: a
        # lease never above what was asked, a window never past the local
        # reader's longest, a break or a claim never past this client's own.
        for (_, budget, _, _, want), (_, granted) in zip(
            batch.budgets, grants, strict=True
        ):
            if granted < 0:
                # A spoilt field, rewritten: the replica's own budget decides
                # until the next sync reads the fleet's count afresh.
                budget.synced = False
                continue
            budget.lease(min(granted, want), now + self._hold(share))
        for (_, lease, _, _, _, want), (_, granted, until, left) in zip(
            batch.quotas, leased, strict=True
        ):
            granted = min(max(granted, 0), want)
            reset_at = min(max(until, 0) / 1000, now + MAX_RESET)
            with lease.lock:
                lease.granted += granted
                if granted:
                    lease.hold_until = min(now + self._hold(share), reset_at)
            lease.reset_at = reset_at
            lease.left = max(left, 0)
            lease.active = until > 0
        held: dict[str, FleetBreak] = {}
        seen = share.claims_seen
        claims: dict[str, float] = {}
        last = now + share.break_duration
        for host, until_ms, claim_ms, mine in view:
            claim_until = min(max(claim_ms, 0) / 1000, last)
            held[host] = FleetBreak(
                min(max(until_ms, 0) / 1000, last), claim_until, mine
            )
            if mine and claim_until > now:
                claims[host] = claim_until
                if seen.get(host) != claims[host]:
                    share.probes[host] = claims[host]  # a claim won just now
        share.claims_seen = claims
        share.open_hosts = held
        share.up = True

    @staticmethod
    def _hold(share: ClientShare) -> float:
        """How long a replica keeps leases it has not spent (seconds).

        Within half the budget's window, so a lease is handed back before the
        fleet's count of it leaves the window.
        """
        terms = share.budget_terms
        return LEASE_HOLD if terms is None else min(LEASE_HOLD, terms.window / 2)


def _check(
    batch: CountedBatch,
    grants: list[tuple[str, int]],
    leased: list[tuple[str, int, int, int]],
) -> None:
    """Raise unless the answer is for the batch's hosts, in its order.

    Raises:
        ValueError: It answers for other hosts, or fewer.
    """
    if len(grants) != len(batch.budgets):
        raise ValueError("the script answered for fewer hosts than asked")
    if len(leased) != len(batch.quotas):
        raise ValueError("the script answered for fewer quotas than asked")
    asked = [row[0] for row in batch.budgets] + [row[0] for row in batch.quotas]
    answered = [row[0] for row in grants] + [row[0] for row in leased]
    if asked != answered:
        raise ValueError("the script answered for another host")


def _parse(
    answer: object,
) -> tuple[
    list[tuple[str, int]],
    list[tuple[str, int, int, bool]],
    list[tuple[str, int, int, int]],
]:
    """The script's answer, checked: grants, breaker view, quota leases.

    Raises:
        ValueError: It is not what the script returns.
    """
    if not isinstance(answer, list):
        raise ValueError("the script's answer is not a triple")
    parts: list[object] = list(answer)  # pyright: ignore[reportUnknownArgumentType]
    if len(parts) != 3:
        raise ValueError("the script's answer is not a triple")
    grants_raw, view_raw, quotas_raw = parts
    grants: list[tuple[str, int]] = []
    for host, granted in _groups(grants_raw, 2):
        grants.append((_text(host), _number(granted)))
    view: list[tuple[str, int, int, bool]] = []
    for host, until, claim, mine in _groups(view_raw, 4):
        view.append((_text(host), _number(until), _number(claim), _number(mine) == 1))
    quotas: list[tuple[str, int, int, int]] = []
    for host, granted, until, left in _groups(quotas_raw, 4):
        quotas.append((_text(host), _number(granted), _number(until), _number(left)))
    return grants, view, quotas


def _groups(raw: object, size: int) -> list[Sequence[object]]:
    if not isinstance(raw, list) or len(raw) % size:  # pyright: ignore[reportUnknownArgumentType]
        raise ValueError("the script's answer has a part of the wrong shape")
    items: list[object] = list(raw)  # pyright: ignore[reportUnknownArgumentType]
    return [items[start : start + size] for start in range(0, len(items), size)]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    raise ValueError("the script's answer has a name that is not text")


def _number(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("the script's answer has a count that is not a number")
