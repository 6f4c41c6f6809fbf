"""`AuditBehavior`: one record per request, with sensitive fields kept out."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import (
    Any,
    ClassVar,
    Protocol,
    runtime_checkable,
)

from injector import inject

from mediator._core.behavior import Next, StreamNext, SyncNext
from mediator._core.clock import Clock
from mediator._core.context import (
    PrincipalProvider,
    current_correlation_id,
    replayed,
)
from mediator._core.degradation import Degradation, degradation_of
from mediator._core.fields import REDACTED, Sensitive, redacted_fields
from mediator._core.stage import Stage

__all__ = [
    "REDACTED",
    "AuditBehavior",
    "AuditRecord",
    "AuditSink",
    "LoggingAuditSink",
    "Sensitive",
]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """What happened to one request.

    Attributes:
        request_type: The request class's qualified name.
        outcome: ``"ok"``, or the qualified name of the exception raised.
        duration: Seconds from entering the chain to leaving it, all attempts.
        principal: The principal's id, or None when anonymous.
        correlation_id: From `correlation_id`, or None.
        fields: The request's fields, sensitive ones replaced by ``"[redacted]"``.
        replayed: True when an ``@idempotent`` command was answered from the
            idempotency store, its handler not run (see `is_replay`).
        degraded: For a ``@fallback`` query its fallback answered, how (see
            `degradation`): the source, the freshness and the original
            failure's type name; the outcome is then ``"ok"``. None otherwise.
    """

    request_type: str
    outcome: str
    duration: float
    principal: str | None
    correlation_id: str | None
    fields: Mapping[str, Any]
    replayed: bool = False
    degraded: Degradation | None = None


@runtime_checkable
class AuditSink(Protocol):
    """Where audit records go."""

    def is_enabled(self) -> bool:
        """Whether records are wanted at all; asked once per request, cheaply."""
        ...

    def write(self, record: AuditRecord) -> None:
        """Store or emit one record."""
        ...


class LoggingAuditSink:
    """The default sink: the ``mediator.audit`` logger at INFO.

    The message names the request type, outcome and duration; the whole record
    is on the log record as ``audit`` (for structured handlers). When the logger
    is disabled for the level, no record is built at all.
    """

    def __init__(
        self, logger: logging.Logger | None = None, level: int = logging.INFO
    ) -> None:
        self._logger = logger or logging.getLogger("mediator.audit")
        self._level = level

    def is_enabled(self) -> bool:
        """Whether the logger would emit at the sink's level."""
        return self._logger.isEnabledFor(self._level)

    def write(self, record: AuditRecord) -> None:
        """Log the record; field values are only in `extra`, never in the text."""
        self._logger.log(
            self._level,
            "%s %s in %.1f ms",
            record.request_type,
            record.outcome,
            record.duration * 1000,
            extra={"audit": record},
        )


class AuditBehavior:
    """Writes one `AuditRecord` per request, whatever happens inside.

    It is outermost (stage AUDIT), so a retried request still gives one record,
    covering all its attempts. It applies to every request, stream and
    notification; with its sink disabled it only asks the sink and passes on.
    """

    stage: ClassVar[Stage] = Stage.AUDIT

    @inject
    def __init__(
        self, sink: AuditSink, principals: PrincipalProvider, clock: Clock
    ) -> None:
        self._enabled = sink.is_enabled
        self._recorder = _Recorder(sink.write, principals, clock)

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the chain, then record the outcome."""
        if not self._enabled():
            return await next()
        with _Audit(self._recorder, request):
            return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path."""
        if not self._enabled():
            return next()
        with _Audit(self._recorder, request):
            return next()

    async def handle_stream(
        self, request: Any, next: StreamNext[Any]
    ) -> AsyncIterator[Any]:
        """One record per stream, written when it ends, fails or is closed."""
        if not self._enabled():
            async for item in next():
                yield item
            return
        with _Audit(self._recorder, request, stream=True):
            async for item in next():
                yield item


class _Recorder:
    """What `AuditBehavior` records with: its sink, principals and clock."""

    __slots__ = ("clock", "principals", "write")

    def __init__(
        self,
        write: Callable[[AuditRecord], None],
        principals: PrincipalProvider,
        clock: Clock,
    ) -> None:
        self.write = write
        self.principals = principals
        self.clock = clock


class _Audit:
    """Around one request, on either path: the clock read before, the record after.

    A plain ``with`` block, so that `AuditBehavior.handle` and ``handle_sync``
    differ only in awaiting ``next()``. It never swallows the failure. Around a
    stream, a consumer that stops early closes it: that is not a failure.
    """

    __slots__ = ("_recorder", "_request", "_started", "_stream")

    def __init__(self, recorder: _Recorder, request: Any, stream: bool = False) -> None:
        self._recorder = recorder
        self._request = request
        self._stream = stream

    def __enter__(self) -> None:
        self._started = self._recorder.clock.monotonic()

    def __exit__(
        self, _type: object, failure: BaseException | None, _tb: object
    ) -> None:
        if failure is None:
            outcome = "ok"
        elif self._stream and isinstance(failure, GeneratorExit):
            outcome = "closed"
        else:
            outcome = type(failure).__qualname__
        recorder = self._recorder
        request = self._request
        principal = recorder.principals.current()
        recorder.write(
            AuditRecord(
                request_type=type(request).__qualname__,
                outcome=outcome,
                duration=recorder.clock.monotonic() - self._started,
                principal=principal.id if principal is not None else None,
                correlation_id=current_correlation_id(),
                fields=redacted_fields(request),
                replayed=replayed(request),
                degraded=degradation_of(request) if failure is None else None,
            )
        )
