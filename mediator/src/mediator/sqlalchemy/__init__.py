"""The SQLAlchemy unit of work for `@transactional` requests (extra ``sqlalchemy``).

Install `SqlAlchemyModule` beside `MediatorModule`: it binds a request-scoped
`Session` (and/or `AsyncSession`) that handlers take through ``@inject``, the
`UnitOfWork` that `TransactionBehavior` runs each attempt in, and the idempotency
store (`SqlAlchemyIdempotencyStore`, on `idempotency_table`) that
`IdempotencyBehavior` claims keys in, and the `mediator.Outbox` whose messages
`OutboxRelay` delivers after the commit (on `outbox_table`).
"""

from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._idempotency.store import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
)
from mediator.sqlalchemy._idempotency.table import (
    acreate_idempotency_table,
    create_idempotency_table,
    idempotency_table,
)
from mediator.sqlalchemy._module import SqlAlchemyModule
from mediator.sqlalchemy._outbox.relay import AsyncHandoff, Handoff, OutboxRelay
from mediator.sqlalchemy._outbox.sql import OutboxMessage, OutboxStats
from mediator.sqlalchemy._outbox.table import (
    acreate_outbox_table,
    create_outbox_table,
    outbox_table,
)
from mediator.sqlalchemy._postgres import prepare_postgres
from mediator.sqlalchemy._sqlite import prepare_sqlite
from mediator.sqlalchemy._unit_of_work import (
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyUnitOfWork,
)

__all__ = [
    "AsyncHandoff",
    "AsyncSqlAlchemyIdempotencyStore",
    "AsyncSqlAlchemyUnitOfWork",
    "Handoff",
    "OutboxMessage",
    "OutboxRelay",
    "OutboxStats",
    "SqlAlchemyIdempotencyStore",
    "SqlAlchemyModule",
    "SqlAlchemyUnitOfWork",
    "acreate_idempotency_table",
    "acreate_outbox_table",
    "create_idempotency_table",
    "create_outbox_table",
    "idempotency_table",
    "outbox_table",
    "prepare_postgres",
    "prepare_sqlite",
    "translate_error",
]

from mediator._primitives.public_names import publish as _publish

_publish(__name__, __all__)
