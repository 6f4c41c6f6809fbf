"""One sync of one `ClientShare` with Redis: a single Lua script call (``redis``).

The only module that imports ``redis``; `SharedState` imports it when made.

Keys, per client (``{namespace}:{<client>}:budget``, ``...:breakers`` and
``...:quota``; the braces keep a client's keys in one Redis Cluster slot):
three hashes, one field per host, each at most `maximum_hosts` fields, each
with a TTL renewed by every sync (two budget windows; two break durations and
a second; the latest quota window's end and a second). A field
that does not parse (another program's value, a truncated write) is dropped
and written afresh; a key of another type is deleted.

The script, given the fleet's time (``now``, Unix milliseconds) and this
replica's news:

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
from typing import Final

import redis

from http_resilience._shared.link import (
    PROBE_OP,
    ClientShare,
    FleetBreak,
    SharedRetryBudget,
)
from http_resilience._shared.quota import QuotaLease

__all__ = ["SCRIPT", "RedisBatch", "client_keys", "connect"]

# Per host: its lease, the quota seen, unused leases given back, leases wanted,
# and the request side's counts (calls, spent, refused) read for the sync.
_QuotaRow = tuple[
    str, QuotaLease, tuple[int, float] | None, int, int, tuple[int, int, int]
]

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
  if #out ~= count then return nil end
  return out
end

local function make_room(key, host)
  if redis.call('HEXISTS', key, host) == 0
      and redis.call('HLEN', key) >= max_hosts then
    local victim = redis.call('HRANDFIELD', key)
    if victim then redis.call('HDEL', key, victim) end
  end
end

local grants = {}
if window > 0 and nb > 0 then
  own(KEYS[1])
  local width = window / BUCKETS
  local bucket = math.floor(now / width)
  local cap = per_second * window / 1000
  for i = 0, nb - 1 do
    local base = 12 + i * 4
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
    local base = 12 + nb * 4 + i * 3
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
if nq > 0 then
  own(KEYS[3])
  local longest = 0
  for i = 0, nq - 1 do
    local base = 12 + nb * 4 + nops * 3 + i * 6
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
return {grants, view, quotas}
"""


def connect(target: object, *, timeout: float) -> tuple[redis.Redis, bool]:
    """A sync client for `target` (a URL or a client); whether it was made here.

    A client made from a URL waits at most `timeout` for any answer: a slow
    Redis fails the sync, and the replica falls back, within one interval.

    Raises:
        TypeError: `target` is neither a URL nor a ``redis.Redis``.
    """
    if isinstance(target, str):
        client = redis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
            target, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        return client, True
    if isinstance(target, redis.Redis):
        return target, False
    raise TypeError(
        "SharedState needs a redis:// URL or a redis.Redis (sync) client, got "
        f"{type(target).__qualname__}"
    )


def client_keys(namespace: str, name: str) -> tuple[str, str, str]:
    """The budget, breaker and quota keys of `name`: bounded, whatever the name."""
    if len(name) > _NAME_LIMIT or any(char in name for char in "{}:\n\r "):
        name = "h" + _digest(name)
    prefix = f"{namespace}:{{{name}}}"
    return f"{prefix}:budget", f"{prefix}:breakers", f"{prefix}:quota"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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

        Raises:
            redis.RedisError: Redis failed or is away.
            ValueError: Its answer is not what the script returns.
        """
        budgets: list[tuple[str, SharedRetryBudget, int, int, int, int, int]] = []
        terms = share.budget_terms
        if terms is not None and share.budget_items is not None:
            for host, budget in share.budget_items():
                if not isinstance(budget, SharedRetryBudget):
                    continue
                deposited, spent, refused = (
                    budget.deposited,
                    budget.spent,
                    budget.refused,
                )
                deposits = deposited - budget.sent_deposits
                demand = (spent - budget.seen_spent) + (refused - budget.seen_refused)
                unused = max(budget.granted - budget.returned - spent, 0)
                if not (deposits or demand or unused):
                    continue
                want = min(self._batch, 2 * demand + 1) if deposits or demand else 0
                budgets.append((host, budget, deposits, unused, want, spent, refused))
                if len(budgets) >= self._batch:
                    break
        quotas = self._quota_rows(share)
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
            len(budgets),
            len(ops),
            len(quotas),
            _NEW_WINDOW_MS,
        ]
        for host, _, deposits, unused, want, _, _ in budgets:
            args += [host, deposits, unused, want]
        for op, host, when in ops:
            args += [op, host, int(when * 1000)]
        for host, lease, observed, unused, want, (calls, _, _) in quotas:
            left, reset = observed if observed is not None else (-1, 0.0)
            unleased = calls - lease.seen_calls
            args += [host, left, int(reset * 1000), unused, unleased, want]
        try:
            answer = self._script(
                keys=list(client_keys(self._namespace, share.name)), args=args
            )
            grants, view, leased = _parse(answer)
        except BaseException:
            # Breaker news is kept for the next try; only probe claims go stale.
            outbox.extendleft(reversed([op for op in ops if op[0] != PROBE_OP]))
            for _, lease, observed, _, _, _ in quotas:
                if observed is not None:
                    with lease.lock:
                        if lease.observed is None:
                            lease.observed = observed
            raise
        for (host, budget, deposits, unused, _, spent, refused), (
            answered,
            granted,
        ) in zip(budgets, grants, strict=False):
            if answered != host:
                raise ValueError("the script answered for another host")
            budget.sent_deposits += deposits
            budget.returned += unused
            budget.granted += granted
            budget.seen_spent, budget.seen_refused = spent, refused
            budget.synced = True
        if len(grants) != len(budgets):
            raise ValueError("the script answered for fewer hosts than asked")
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
        self._lease(quotas, leased)
        share.up = True

    def _quota_rows(self, share: ClientShare) -> list[_QuotaRow]:
        """Per host: its lease, the quota seen, unused given back, wanted, counts."""
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
            rows.append((host, lease, seen, giving, want, (calls, spent, refused)))
            if len(rows) >= self._batch:
                break
        return rows

    @staticmethod
    def _lease(
        rows: list[_QuotaRow],
        leased: list[tuple[str, int, int, int]],
    ) -> None:
        if len(leased) != len(rows):
            raise ValueError("the script answered for fewer quotas than asked")
        for (host, lease, _, _, _, counts), (answered, granted, until, left) in zip(
            rows, leased, strict=True
        ):
            if answered != host:
                raise ValueError("the script answered for another host")
            with lease.lock:
                lease.granted += granted
            lease.seen_calls, lease.seen_spent, lease.seen_refused = counts
            lease.reset_at = until / 1000
            lease.left = left
            lease.active = until > 0


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
