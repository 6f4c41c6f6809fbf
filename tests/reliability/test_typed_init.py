"""The `__init__` each options model declares for type checkers matches its fields.

Type checkers take a pydantic field's annotation as its constructor parameter,
so a `Duration` field would take only a `timedelta`; each model declares, under
``if TYPE_CHECKING``, an `__init__` whose duration parameters take
`DurationInput` (`tests/typing/check_durations.py` checks the calls). Nothing
runs that `__init__`, so this test holds it to the fields: the same names in
the same order, keyword-only, the same defaults, and `DurationInput` exactly
where the field is a duration.
"""

from __future__ import annotations

import ast
import textwrap
from datetime import timedelta

import pydantic
import pytest
from pydantic_core import PydanticUndefined

from http_resilience import (
    BreakerOptions,
    HedgingOptions,
    HttpResilienceOptions,
    LimiterOptions,
    RetryOptions,
    StreamRetryOptions,
)
from http_resilience._strategies.timeout.options import TimeoutOptions
from mediator_resilience import ResilienceMediatorOptions
from tests.support.written_in import class_source, written_in

WITH_DURATIONS = [
    HttpResilienceOptions,
    RetryOptions,
    BreakerOptions,
    HedgingOptions,
    TimeoutOptions,
    StreamRetryOptions,
    ResilienceMediatorOptions,
]


def declared_init(model: type[pydantic.BaseModel]) -> ast.FunctionDef | None:
    body = ast.parse(textwrap.dedent(class_source(model))).body
    [klass] = body
    assert isinstance(klass, ast.ClassDef)
    for statement in klass.body:
        if (
            isinstance(statement, ast.If)
            and isinstance(statement.test, ast.Name)
            and statement.test.id == "TYPE_CHECKING"
        ):
            for inner in statement.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "__init__":
                    return inner
    return None


@pytest.mark.parametrize("model", WITH_DURATIONS, ids=lambda model: model.__name__)
def test_the_declared_init_takes_every_field_as_the_model_does(
    model: type[pydantic.BaseModel],
) -> None:
    init = declared_init(model)
    assert init is not None, f"{model.__name__} declares no __init__ for checkers"
    arguments = init.args
    assert [a.arg for a in arguments.args] == ["self"]
    assert arguments.vararg is None
    assert arguments.kwarg is None
    names = [a.arg for a in arguments.kwonlyargs]
    assert names == list(model.model_fields)
    namespace = vars(written_in(model))
    for argument, default in zip(
        arguments.kwonlyargs, arguments.kw_defaults, strict=True
    ):
        field = model.model_fields[argument.arg]
        if field.default is PydanticUndefined:
            assert default is None, argument.arg
        else:
            assert default is not None, argument.arg
            assert eval(ast.unparse(default), namespace) == field.default
        annotation = ast.unparse(argument.annotation) if argument.annotation else ""
        is_duration = field.annotation is timedelta
        assert (annotation == "DurationInput") is is_duration, argument.arg


def test_a_model_without_durations_declares_no_init() -> None:
    assert declared_init(LimiterOptions) is None
