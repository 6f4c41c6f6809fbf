"""In-process command/query mediator with an ordered behavior chain.

Requests are typed by their response, each has exactly one handler, and every
send runs through the behaviors that apply to its type. Handlers and behaviors
are built by `injector`.
"""

from mediator._behavior import Behavior, Next, StreamNext, SyncNext
from mediator._errors import (
    BusinessRuleError,
    ConfigurationError,
    ConflictError,
    DomainError,
    DuplicateHandlerError,
    FieldError,
    ForbiddenError,
    HandlerNotFoundError,
    MediatorError,
    NotFoundError,
    ScopeError,
    SyncPathError,
    UnresolvableDependencyError,
    ValidationError,
)
from mediator._handlers import (
    CommandHandler,
    NotificationHandler,
    QueryHandler,
    RequestHandler,
    StreamHandler,
)
from mediator._mediator import Mediator
from mediator._module import (
    BehaviorRegistration,
    MediatorConfig,
    MediatorModule,
    register_behavior,
)
from mediator._requests import Command, Notification, Query, Request, StreamQuery
from mediator._scope import RequestScope, request_scope
from mediator._stage import Stage

__all__ = [
    "Behavior",
    "BehaviorRegistration",
    "BusinessRuleError",
    "Command",
    "CommandHandler",
    "ConfigurationError",
    "ConflictError",
    "DomainError",
    "DuplicateHandlerError",
    "FieldError",
    "ForbiddenError",
    "HandlerNotFoundError",
    "Mediator",
    "MediatorConfig",
    "MediatorError",
    "MediatorModule",
    "Next",
    "NotFoundError",
    "Notification",
    "NotificationHandler",
    "Query",
    "QueryHandler",
    "Request",
    "RequestHandler",
    "RequestScope",
    "ScopeError",
    "Stage",
    "StreamHandler",
    "StreamNext",
    "StreamQuery",
    "SyncNext",
    "SyncPathError",
    "UnresolvableDependencyError",
    "ValidationError",
    "register_behavior",
    "request_scope",
]
