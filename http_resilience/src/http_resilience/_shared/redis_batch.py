"""One sync of one `ClientShare` with Redis: a single Lua script call (``redis``).

The only module that imports ``redis``; `SharedState` imports it when made.

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

The script, given the fleet's time (``now``, Unix milliseconds) and this
replica's news (the counted part only if the batch is new, see above):

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

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import redis

from http_resilience._core.hosts import safe_target
from http_resilience._shared.link import (
    PROBE_OP,
    ClientShare,
    FleetBreak,
    SharedRetryBudget,
)
from http_resilience._shared.quota import QuotaLease

__all__ = [
    "MEMORY",
    "RESEND_FOR",
    "SCRIPT",
    "CountedBatch",
    "RedisBatch",
    "client_keys",
    "connect",
]

# Per host: its budget, first attempts, unused leases given back, leases wanted.
_BudgetRow = tuple[str, SharedRetryBudget, int, int, int]
# Per host: its lease, the quota seen, unused leases given back, requests sent
# unleased, leases wanted.
_QuotaRow = tuple[str, QuotaLease, tuple[int, float] | None, int, int, int]

# How long the script remembers a replica's last batch (seconds), and how long
# a replica sends an unanswered batch again: well within it, so a batch is
# never applied twice for want of memory (the replicas' clocks agree closely).
MEMORY: Final = 60.0
RESEND_FOR: Final = 45.0

_NAME_LIMIT: Final = 64
# A quota seen with a reset later than the window Redis holds by more than this
# is a new window (a reset is given in whole seconds, so it jitters by one).
_NEW_WINDOW_MS: Final = 1500

SCRIPT: Final = """
local now = tonumber(ARGV[1])
local token = tonumber(ARGV[2])
local max_hosts = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local ratio = tonumber(ARGV[5])
local per_second = tonumber(ARGV[6])
local break_ms = tonumber(ARGV[7])
local nb = tonumber(ARGV[8])
local nops = tonumber(ARGV[9])
local nq = tonumber(ARGV[10])
local slack = tonumber(ARGV[11])
local replica = ARGV[12]
local seq = tonumber(ARGV[13])
local memory = tonumber(ARGV[14])
local FIRST = 15
local BUCKETS = 10

local function own(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', key) end
end

local function parse(value, count)
  if not value then return nil end
  local out = {}
  for part in string.gmatch(value, '[^,]+') do
    local n = tonumber(part)
    if n == nil then return nil end
    out[#out + 1] = n
  end
  if count ~= nil and #out ~= count then return nil end
  return out
end

local function make_room(key, host)
  if redis.call('HEXISTS', key, host) == 0
      and redis.call('HLEN', key) >= max_hosts then
    local victim = redis.call('HRANDFIELD', key)
    if victim then redis.call('HDEL', key, victim) end
  end
end

-- A numbered batch this replica sent before and the script applied: not
-- applied again; answered with the leases granted then (`kept`).
local kept = nil
if seq > 0 then
  own(KEYS[4])
  local m = parse(redis.call('HGET', KEYS[4], replica))
  if m ~= nil and #m >= 3 and m[1] >= seq then kept = m end
end

local grants = {}
if kept ~= nil then
  if window > 0 then
    for i = 0, nb - 1 do
      grants[#grants + 1] = ARGV[FIRST + i * 4]
      grants[#grants + 1] = i < kept[3] and kept[4 + i] or 0
    end
  end
elseif window > 0 and nb > 0 then
  own(KEYS[1])
  local width = window / BUCKETS
  local bucket = math.floor(now / width)
  local cap = per_second * window / 1000
  for i = 0, nb - 1 do
    local base = FIRST + i * 4
    local host = ARGV[base]
    local deposits = tonumber(ARGV[base + 1])
    local returned = tonumber(ARGV[base + 2])
    local want = tonumber(ARGV[base + 3])
    local s = parse(redis.call('HGET', KEYS[1], host), 2 + 2 * BUCKETS)
    if s == nil then
      make_room(KEYS[1], host)
      s = {bucket, now - 1000}
      for j = 1, 2 * BUCKETS do s[#s + 1] = 0 end
    end
    local steps = bucket - s[1]
    if steps >= BUCKETS then
      for j = 3, 2 + 2 * BUCKETS do s[j] = 0 end
      s[1] = bucket
    elseif steps > 0 then
      for b = s[1] + 1, bucket do
        s[3 + b % BUCKETS] = 0
        s[3 + BUCKETS + b % BUCKETS] = 0
      end
      s[1] = bucket
    end
    local slot = s[1] % BUCKETS
    s[3 + slot] = s[3 + slot] + deposits
    local step = 0
    while returned > 0 and step < BUCKETS do
      local k = 3 + BUCKETS + (s[1] - step) % BUCKETS
      local take = math.min(returned, s[k])
      s[k] = s[k] - take
      returned = returned - take
      step = step + 1
    end
    local d, w = 0, 0
    for j = 0, BUCKETS - 1 do
      d = d + s[3 + j]
      w = w + s[3 + BUCKETS + j]
    end
    local floor = per_second * (now - s[2]) / 1000
    if floor > cap then floor = cap end
    local granted = math.floor(ratio * d + floor + 1e-9) - w
    if granted > want then granted = want end
    if granted < 0 then granted = 0 end
    s[3 + BUCKETS + slot] = s[3 + BUCKETS + slot] + granted
    redis.call('HSET', KEYS[1], host, table.concat(s, ','))
    grants[#grants + 1] = host
    grants[#grants + 1] = granted
  end
  redis.call('PEXPIRE', KEYS[1], 2 * window)
end

local view = {}
if break_ms > 0 then
  own(KEYS[2])
  for i = 0, nops - 1 do
    local base = FIRST + nb * 4 + i * 3
    local op, host, arg = ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2])
    local s = parse(redis.call('HGET', KEYS[2], host), 3)
    if op == 'o' then
      make_room(KEYS[2], host)
      if s ~= nil and s[1] > arg then arg = s[1] end
      redis.call('HSET', KEYS[2], host, arg .. ',0,0')
    elseif op == 'c' then
      redis.call('HDEL', KEYS[2], host)
    elseif op == 'p' and s ~= nil and s[1] <= now and s[2] <= now then
      redis.call('HSET', KEYS[2], host,
        s[1] .. ',' .. (now + break_ms) .. ',' .. token)
    end
  end
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local s = parse(all[i + 1], 3)
    if s == nil or (s[1] + break_ms < now and s[2] <= now) then
      redis.call('HDEL', KEYS[2], all[i])
    else
      view[#view + 1] = all[i]
      view[#view + 1] = s[1]
      view[#view + 1] = s[2]
      view[#view + 1] = s[3] == token and 1 or 0
    end
  end
  if #all > 0 then redis.call('PEXPIRE', KEYS[2], 2 * break_ms + 1000) end
end

local quotas = {}
if kept ~= nil then
  for i = 0, nq - 1 do
    local host = ARGV[FIRST + nb * 4 + nops * 3 + i * 6]
    local s = parse(redis.call('HGET', KEYS[3], host), 2)
    if s == nil or s[1] <= now or s[2] < 0 then
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
    else
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = kept[4 + (kept[3] or 0) + i] or 0
      quotas[#quotas + 1] = s[1]
      quotas[#quotas + 1] = s[2]
    end
  end
elseif nq > 0 then
  own(KEYS[3])
  local longest = 0
  for i = 0, nq - 1 do
    local base = FIRST + nb * 4 + nops * 3 + i * 6
    local host = ARGV[base]
    local seen = tonumber(ARGV[base + 1])
    local seen_reset = tonumber(ARGV[base + 2])
    local returned = tonumber(ARGV[base + 3])
    local unleased = tonumber(ARGV[base + 4])
    local want = tonumber(ARGV[base + 5])
    local s = parse(redis.call('HGET', KEYS[3], host), 2)
    if s ~= nil and (s[1] <= now or s[2] < 0) then s = nil end
    if s ~= nil then s[2] = s[2] + returned end
    if seen >= 0 and seen_reset > now then
      if s == nil or seen_reset > s[1] + slack then
        make_room(KEYS[3], host)
        s = {seen_reset, seen}
      elseif seen < s[2] then
        s[2] = seen
      end
    end
    if s ~= nil then s[2] = math.max(s[2] - unleased, 0) end
    if s == nil then
      redis.call('HDEL', KEYS[3], host)
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
      quotas[#quotas + 1] = 0
    else
      local granted = math.min(want, s[2])
      if granted < 0 then granted = 0 end
      s[2] = s[2] - granted
      redis.call('HSET', KEYS[3], host, s[1] .. ',' .. s[2])
      if s[1] > longest then longest = s[1] end
      quotas[#quotas + 1] = host
      quotas[#quotas + 1] = granted
      quotas[#quotas + 1] = s[1]
      quotas[#quotas + 1] = s[2]
    end
  end
  if longest > 0 then
    local ttl = longest - now + 1000
    if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
end

if seq > 0 and kept == nil then
  -- Remember this batch: its number, when, and the leases it granted.
  local memo = {seq, now, #grants / 2}
  for i = 2, #grants, 2 do memo[#memo + 1] = grants[i] end
  for i = 2, #quotas, 4 do memo[#memo + 1] = quotas[i] end
  make_room(KEYS[4], replica)
  redis.call('HSET', KEYS[4], replica, table.concat(memo, ','))
  -- Forget one replica at random if it has been quiet for the memory's span.
  local other = redis.call('HRANDFIELD', KEYS[4], 1, 'WITHVALUES')
  if other[1] ~= nil and other[1] ~= replica then
    local m = parse(other[2])
    if m == nil or #m < 2 or m[2] + memory <= now then
      redis.call('HDEL', KEYS[4], other[1])
    end
  end
  redis.call('PEXPIRE', KEYS[4], memory)
end
return {grants, view, quotas}
"""


def connect(target: object, *, timeout: float) -> tuple[redis.Redis, bool]:
    """A sync client for `target` (a URL or a client); whether it was made here.

    A client made from a URL waits at most `timeout` for any answer: a slow
    Redis fails the sync, and the replica falls back, within one interval.

    Raises:
        TypeError: `target` is neither a URL nor a ``redis.Redis``.
        ValueError: `target` is no URL redis-py reads; the message names its
            scheme, host and port only.
    """
    if isinstance(target, str):
        try:
            client = redis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
                target, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        except ValueError:
            # redis-py's message may quote a part of the URL, which can hold
            # the password: neither it nor the URL is passed on.
            raise ValueError(
                f"SharedState: {safe_target(target)} is no Redis URL redis-py can "
                "read: give redis://host[:port][/db], rediss://... or unix://..., "
                "with a port, a database number and query options it knows"
            ) from None
        return client, True
    if isinstance(target, redis.Redis):
        return target, False
    raise TypeError(
        "SharedState needs a redis:// URL or a redis.Redis (sync) client, got "
        f"{type(target).__qualname__}"
    )


def client_keys(namespace: str, name: str) -> tuple[str, str, str, str]:
    """The budget, breaker, quota and replica keys of `name`: bounded names."""
    if len(name) > _NAME_LIMIT or any(char in name for char in "{}:\n\r "):
        name = "h" + _digest(name)
    prefix = f"{namespace}:{{{name}}}"
    return (
        f"{prefix}:budget",
        f"{prefix}:breakers",
        f"{prefix}:quota",
        f"{prefix}:replicas",
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class CountedBatch:
    """One replica's counted news, numbered: sent again, the same, until answered.

    Attributes:
        sequence: Its number, for the replica (0: nothing counted, no number).
        since: When it was first sent (the fleet's time, seconds).
        budgets: Per host: its budget, first attempts, unused leases handed
            back, leases wanted.
        quotas: Per host: its lease, the quota seen, unused leases handed
            back, requests sent unleased, leases wanted.
    """

    sequence: int
    since: float
    budgets: list[_BudgetRow]
    quotas: list[_QuotaRow]


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
            batch = self._counted(share, now)
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
        args: list[str | int | float] = [
            int(now * 1000),
            share.token,
            self._hosts,
            int(terms.window * 1000) if terms is not None else 0,
            terms.ratio if terms is not None else 0,
            terms.min_per_second if terms is not None else 0,
            int(share.break_duration * 1000),
            len(batch.budgets),
            len(ops),
            len(batch.quotas),
            _NEW_WINDOW_MS,
            share.replica,
            batch.sequence,
            int(MEMORY * 1000),
        ]
        for host, _, deposits, unused, want in batch.budgets:
            args += [host, deposits, unused, want]
        for op, host, when in ops:
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
        for (_, budget, _, _, _), (_, granted) in zip(
            batch.budgets, grants, strict=True
        ):
            budget.granted += granted
            budget.synced = True
        for (_, lease, _, _, _, _), (_, granted, until, left) in zip(
            batch.quotas, leased, strict=True
        ):
            with lease.lock:
                lease.granted += granted
            lease.reset_at = until / 1000
            lease.left = left
            lease.active = until > 0
        held: dict[str, FleetBreak] = {}
        seen = share.claims_seen
        claims: dict[str, float] = {}
        for host, until, claim_until, mine in view:
            held[host] = FleetBreak(until / 1000, claim_until / 1000, mine)
            if mine and claim_until / 1000 > now:
                claims[host] = claim_until / 1000
                if seen.get(host) != claims[host]:
                    share.probes[host] = claims[host]  # a claim won just now
        share.claims_seen = claims
        share.open_hosts = held
        share.up = True

    def _counted(self, share: ClientShare, now: float) -> CountedBatch:
        """The counted news since the last batch, taken as sent: a new batch."""
        budgets = self._budget_rows(share)
        quotas = self._quota_rows(share)
        sequence = 0
        if budgets or quotas:
            share.sequence += 1
            sequence = share.sequence
        return CountedBatch(sequence, now, budgets, quotas)

    def _budget_rows(self, share: ClientShare) -> list[_BudgetRow]:
        """Per host: first attempts since, unused given back now, wanted."""
        rows: list[_BudgetRow] = []
        if share.budget_terms is None or share.budget_items is None:
            return rows
        for host, budget in share.budget_items():
            if not isinstance(budget, SharedRetryBudget):
                continue
            deposited, spent, refused = budget.deposited, budget.spent, budget.refused
            deposits = deposited - budget.sent_deposits
            demand = (spent - budget.seen_spent) + (refused - budget.seen_refused)
            unused = budget.granted - budget.returned - spent
            if not (deposits or demand or unused > 0):
                continue
            want = min(self._batch, 2 * demand + 1) if deposits or demand else 0
            unused = budget.give_back()
            budget.sent_deposits = deposited
            budget.seen_spent, budget.seen_refused = spent, refused
            rows.append((host, budget, deposits, unused, want))
            if len(rows) >= self._batch:
                break
        return rows

    def _quota_rows(self, share: ClientShare) -> list[_QuotaRow]:
        """Per host: the quota seen, unused given back, sent unleased, wanted."""
        strategy = share.quota
        if strategy is None:
            return []
        with share.lock:
            leases = list(strategy.leases.items())
        rows: list[_QuotaRow] = []
        for host, lease in leases:
            with lease.lock:
                seen, lease.observed = lease.observed, None
                calls, spent, refused = lease.calls, lease.spent, lease.refused
                demand = (
                    (calls - lease.seen_calls)
                    + (spent - lease.seen_spent)
                    + (refused - lease.seen_refused)
                )
                unused = lease.unused()
                # Idle: give back now, under the lock, so nothing spends it too.
                giving = unused if not demand else 0
                lease.returned += giving
            if not (seen is not None or demand or giving or lease.active):
                continue
            want = max(min(self._batch, 2 * demand + 1) - unused, 0) if demand else 0
            unleased = calls - lease.seen_calls
            lease.seen_calls, lease.seen_spent, lease.seen_refused = (
                calls,
                spent,
                refused,
            )
            rows.append((host, lease, seen, giving, unleased, want))
            if len(rows) >= self._batch:
                break
        return rows


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
