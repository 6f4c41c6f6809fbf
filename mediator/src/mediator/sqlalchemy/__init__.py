"""The SQLAlchemy unit of work for `@transactional` requests (extra ``sqlalchemy``).

Install `SqlAlchemyModule` beside `MediatorModule`: it binds a request-scoped
`Session` (and/or `AsyncSession`) that handlers take through ``@inject``, and the
`UnitOfWork` that `TransactionBehavior` runs each attempt in.
"""

from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._module import SqlAlchemyModule
from mediator.sqlalchemy._sqlite import prepare_sqlite
from mediator.sqlalchemy._unit_of_work import (
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyUnitOfWork,
)

__all__ = [
    "AsyncSqlAlchemyUnitOfWork",
    "SqlAlchemyModule",
    "SqlAlchemyUnitOfWork",
    "prepare_sqlite",
    "translate_error",
]
