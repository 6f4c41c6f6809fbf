"""`AuditBehavior`: one record per request, with sensitive fields kept out."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ClassVar,
    Final,
    Protocol,
    get_args,
    get_origin,
    runtime_checkable,
)

from injector import inject
from pydantic import BaseModel, SecretBytes, SecretStr

from mediator._behavior import Next, StreamNext, SyncNext
from mediator._clock import Clock
from mediator._context import PrincipalProvider, current_correlation_id
from mediator._stage import Stage

__all__ = [
    "REDACTED",
    "AuditBehavior",
    "AuditRecord",
    "AuditSink",
    "LoggingAuditSink",
    "Sensitive",
]

REDACTED: Final = "[redacted]"  # what a sensitive field's value becomes in a record


class Sensitive:
    """Marks a request field that must never reach an audit record.

    Use it as `Annotated` metadata; `SecretStr` and `SecretBytes` fields are
    treated as sensitive without it.

    Example:
        >>> from typing import Annotated
        >>> from mediator import Command
        >>> class Pay(Command[str]):
        ...     card_number: Annotated[str, Sensitive()]
    """

    def __repr__(self) -> str:
        return "Sensitive()"


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
    """

    request_type: str
    outcome: str
    duration: float
    principal: str | None
    correlation_id: str | None
    fields: Mapping[str, Any]


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
        self._write = sink.write
        self._principals = principals
        self._clock = clock

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the chain, then record the outcome."""
        if not self._enabled():
            return await next()
        started = self._clock.monotonic()
        outcome = "ok"
        try:
            return await next()
        except BaseException as error:
            outcome = type(error).__qualname__
            raise
        finally:
            self._record(request, outcome, started)

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path."""
        if not self._enabled():
            return next()
        started = self._clock.monotonic()
        outcome = "ok"
        try:
            return next()
        except BaseException as error:
            outcome = type(error).__qualname__
            raise
        finally:
            self._record(request, outcome, started)

    async def handle_stream(
        self, request: Any, next: StreamNext[Any]
    ) -> AsyncIterator[Any]:
        """One record per stream, written when it ends, fails or is closed."""
        if not self._enabled():
            async for item in next():
                yield item
            return
        started = self._clock.monotonic()
        outcome = "ok"
        try:
            async for item in next():
                yield item
        except GeneratorExit:
            outcome = "closed"  # the consumer stopped early: not a failure
            raise
        except BaseException as error:
            outcome = type(error).__qualname__
            raise
        finally:
            self._record(request, outcome, started)

    def _record(self, request: Any, outcome: str, started: float) -> None:
        principal = self._principals.current()
        self._write(
            AuditRecord(
                request_type=type(request).__qualname__,
                outcome=outcome,
                duration=self._clock.monotonic() - started,
                principal=principal.id if principal is not None else None,
                correlation_id=current_correlation_id(),
                fields=redacted_fields(request),
            )
        )


def redacted_fields(model: BaseModel) -> dict[str, Any]:
    """The model's fields, recursively, with sensitive values replaced."""
    sensitive = _sensitive_fields(type(model))
    result: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if name in sensitive or isinstance(value, SecretStr | SecretBytes):
            result[name] = REDACTED
        else:
            result[name] = _redacted_value(value)
    return result


@functools.cache
def _sensitive_fields(model: type[BaseModel]) -> frozenset[str]:
    # Marked anywhere in the annotation: `Annotated[str, Sensitive()] | None` and
    # `list[Annotated[str, Sensitive()]]` keep the marker inside the type.
    return frozenset(
        name
        for name, info in model.model_fields.items()
        if any(isinstance(m, Sensitive) for m in info.metadata)
        or _marked(info.annotation)
    )


def _marked(annotation: object) -> bool:
    metadata: tuple[object, ...] = getattr(annotation, "__metadata__", ())
    if get_origin(annotation) is Annotated and any(
        isinstance(m, Sensitive) for m in metadata
    ):
        return True
    return any(_marked(argument) for argument in get_args(annotation))


def _redacted_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return redacted_fields(value)
    if isinstance(value, list | tuple):
        return [_redacted_value(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        return {k: _redacted_value(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
    return value
