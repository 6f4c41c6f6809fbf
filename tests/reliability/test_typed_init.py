"""Type checkers see each options model's duration fields take `DurationInput`.

Type checkers take a pydantic field's annotation as its constructor parameter.
Under ``TYPE_CHECKING`` the packages' duration types (`Duration`,
`OptionalDuration`, `PositiveDuration`, `NonNegativeDuration`) are a
`Setting` that takes `DurationInput` and holds a `timedelta`
(`tests/typing/check_durations.py` checks the calls). This test holds every
duration field of every model to those types, so none takes only a
`timedelta`, and holds the models to declare no `__init__` of their own.
"""

from __future__ import annotations

import ast
import textwrap
from datetime import timedelta
from typing import Annotated, Any, get_args, get_origin

import pydantic
import pytest

from http_resilience import (
    BreakerOptions,
    ConcurrencyLimiterOptions,
    HedgingOptions,
    HttpResilienceOptions,
    RetryOptions,
    StreamRetryOptions,
)
from http_resilience._strategies.timeout.options import TimeoutOptions
from mediator_resilience import ResilienceMediatorOptions
from tests.support.written_in import class_source

WITH_DURATIONS = [
    HttpResilienceOptions,
    RetryOptions,
    BreakerOptions,
    HedgingOptions,
    TimeoutOptions,
    StreamRetryOptions,
    ResilienceMediatorOptions,
]
DURATION_TYPES = {
    "Duration",
    "OptionalDuration",
    "PositiveDuration",
    "NonNegativeDuration",
}


def holds_a_duration(annotation: Any) -> bool:
    """`timedelta`, or `timedelta` or None."""
    held = [
        get_args(arg)[0] if get_origin(arg) is Annotated else arg
        for arg in get_args(annotation)
    ]
    return annotation is timedelta or held == [timedelta, type(None)]


def written_annotations(model: type[pydantic.BaseModel]) -> dict[str, str]:
    [klass] = ast.parse(textwrap.dedent(class_source(model))).body
    assert isinstance(klass, ast.ClassDef)
    assert not any(
        isinstance(node, ast.FunctionDef) and node.name == "__init__"
        for node in ast.walk(klass)
    ), f"{model.__name__} declares an __init__"
    return {
        statement.target.id: ast.unparse(statement.annotation)
        for statement in klass.body
        if isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
    }


@pytest.mark.parametrize(
    "model",
    [*WITH_DURATIONS, ConcurrencyLimiterOptions],
    ids=lambda model: model.__name__,
)
def test_every_duration_field_has_a_duration_type(
    model: type[pydantic.BaseModel],
) -> None:
    written = written_annotations(model)
    for name, field in model.model_fields.items():
        is_duration = holds_a_duration(field.annotation)
        assert (written[name] in DURATION_TYPES) is is_duration, name


@pytest.mark.parametrize("model", WITH_DURATIONS, ids=lambda model: model.__name__)
def test_the_models_have_durations(model: type[pydantic.BaseModel]) -> None:
    assert any(
        holds_a_duration(field.annotation) for field in model.model_fields.values()
    )
