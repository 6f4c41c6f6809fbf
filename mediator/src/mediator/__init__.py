"""In-process command/query mediator with an ordered behavior chain.

Requests are typed by their response, each has exactly one handler, and every
send runs through the behaviors that apply to its type. Handlers and behaviors
are built by `injector`.
"""

from mediator._behaviors.audit import (
    AuditBehavior,
    AuditRecord,
    AuditSink,
    LoggingAuditSink,
    Sensitive,
)
from mediator._behaviors.authorization import AuthorizationBehavior, Policy, authorize
from mediator._behaviors.fallback.behavior import FallbackBehavior
from mediator._behaviors.fallback.handler import FallbackHandler
from mediator._behaviors.fallback.marker import fallback
from mediator._behaviors.idempotency.behavior import (
    IdempotencyBehavior,
    IdempotencyOptions,
)
from mediator._behaviors.idempotency.marker import (
    current_idempotency_key,
    derive_idempotency_key,
    idempotency_key,
    idempotent,
    is_replay,
)
from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    Claim,
    IdempotencyStore,
    StoredOutcome,
)
from mediator._behaviors.transaction.behavior import (
    AsyncUnitOfWork,
    TransactionBehavior,
    UnitOfWork,
)
from mediator._behaviors.transaction.marker import is_transactional, transactional
from mediator._behaviors.validation import ValidationBehavior, Validator
from mediator._core.behavior import Behavior, Next, StreamNext, SyncNext
from mediator._core.clock import Clock, SystemClock, SystemWallClock, WallClock
from mediator._core.context import (
    ContextPrincipalProvider,
    Principal,
    PrincipalProvider,
    acting_as,
    correlation_id,
    current_correlation_id,
    current_principal,
)
from mediator._core.degradation import Degradation, degradation, degraded
from mediator._core.errors import (
    BusinessRuleError,
    ConfigurationError,
    ConflictError,
    DeadlineExceededError,
    DomainError,
    DuplicateHandlerError,
    FieldError,
    ForbiddenError,
    HandlerNotFoundError,
    IdempotencyKeyMismatchError,
    MediatorError,
    NotFoundError,
    ScopeError,
    SyncPathError,
    TransientDatabaseError,
    UnresolvableDependencyError,
    ValidationError,
)
from mediator._core.handlers import (
    CommandHandler,
    NotificationHandler,
    QueryHandler,
    RequestHandler,
    StreamHandler,
)
from mediator._core.requests import Command, Notification, Query, Request, StreamQuery
from mediator._core.scope import (
    RequestScope,
    at_scope_exit,
    in_unit_of_work,
    request_scope,
)
from mediator._core.stage import Stage
from mediator._dispatch.mediator import Mediator
from mediator._dispatch.module import (
    BehaviorRegistration,
    MediatorConfig,
    MediatorModule,
    register_behavior,
)
from mediator._dispatch.outbox import Outbox, OutboxEntry

__all__ = [
    "AsyncIdempotencyStore",
    "AsyncUnitOfWork",
    "AuditBehavior",
    "AuditRecord",
    "AuditSink",
    "AuthorizationBehavior",
    "Behavior",
    "BehaviorRegistration",
    "BusinessRuleError",
    "Claim",
    "Clock",
    "Command",
    "CommandHandler",
    "ConfigurationError",
    "ConflictError",
    "ContextPrincipalProvider",
    "DeadlineExceededError",
    "Degradation",
    "DomainError",
    "DuplicateHandlerError",
    "FallbackBehavior",
    "FallbackHandler",
    "FieldError",
    "ForbiddenError",
    "HandlerNotFoundError",
    "IdempotencyBehavior",
    "IdempotencyKeyMismatchError",
    "IdempotencyOptions",
    "IdempotencyStore",
    "LoggingAuditSink",
    "Mediator",
    "MediatorConfig",
    "MediatorError",
    "MediatorModule",
    "Next",
    "NotFoundError",
    "Notification",
    "NotificationHandler",
    "Outbox",
    "OutboxEntry",
    "Policy",
    "Principal",
    "PrincipalProvider",
    "Query",
    "QueryHandler",
    "Request",
    "RequestHandler",
    "RequestScope",
    "ScopeError",
    "Sensitive",
    "Stage",
    "StoredOutcome",
    "StreamHandler",
    "StreamNext",
    "StreamQuery",
    "SyncNext",
    "SyncPathError",
    "SystemClock",
    "SystemWallClock",
    "TransactionBehavior",
    "TransientDatabaseError",
    "UnitOfWork",
    "UnresolvableDependencyError",
    "ValidationBehavior",
    "ValidationError",
    "Validator",
    "WallClock",
    "acting_as",
    "at_scope_exit",
    "authorize",
    "correlation_id",
    "current_correlation_id",
    "current_idempotency_key",
    "current_principal",
    "degradation",
    "degraded",
    "derive_idempotency_key",
    "fallback",
    "idempotency_key",
    "idempotent",
    "in_unit_of_work",
    "is_replay",
    "is_transactional",
    "register_behavior",
    "request_scope",
    "transactional",
]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
