"""Public names are the only names users see.

Every class and function a public module exports says it lives there (its
``__module__``), so reprs, pickles and tracebacks never name a private file and
private files can move. Their type hints still resolve, and the exceptions and
option models still pickle.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import pkgutil
import subprocess
import sys
import typing
from datetime import timedelta
from types import ModuleType

import httpx
import pydantic
import pytest

PACKAGES = ("http_resilience", "mediator", "mediator_resilience")


def _public_modules() -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        found.append(package)
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            parts = info.name.split(".")
            if not any(part.startswith("_") for part in parts) and parts[-1] != (
                "pytest_plugin"
            ):
                found.append(info.name)
    return found


PUBLIC = _public_modules()


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _exports() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC for name in _module(module).__all__]


def _home(name: str, value: object) -> str:
    """The public module that should name `value`: its package root, else the first."""
    owners = [m for m in PUBLIC if getattr(_module(m), name, None) is value]
    return owners[0]


def _movable(value: object) -> bool:
    return inspect.isclass(value) or inspect.isfunction(value)


MOVABLE = [
    (module, name)
    for module, name in _exports()
    if _movable(getattr(_module(module), name))
]
CLASSES = [
    (module, name)
    for module, name in MOVABLE
    if inspect.isclass(getattr(_module(module), name))
]


def test_every_public_module_is_listed() -> None:
    assert {
        "http_resilience",
        "http_resilience.asgi",
        "http_resilience.injector",
        "http_resilience.otel",
        "http_resilience.testing",
        "http_resilience.wsgi",
        "mediator",
        "mediator.asgi",
        "mediator.otel",
        "mediator.sqlalchemy",
        "mediator.wsgi",
        "mediator_resilience",
        "mediator_resilience.testing",
    } <= set(PUBLIC)
    assert len(MOVABLE) > 150


@pytest.mark.parametrize(("module", "name"), MOVABLE, ids="{0[0]}:{0[1]}".format)
def test_an_exported_object_names_its_public_module(module: str, name: str) -> None:
    value = getattr(_module(module), name)
    assert value.__module__ == _home(name, value)
    # What pickle and `repr` do with it: found again by its public name.
    assert getattr(_module(value.__module__), value.__qualname__) is value


@pytest.mark.parametrize("module", ["mediator.wsgi", "http_resilience.wsgi"], ids=str)
def test_a_name_two_sub_namespaces_share_has_one_home_whatever_is_imported(
    module: str,
) -> None:
    code = f"import {module}; print({module}.MiddlewareOrderError.__module__)"
    shown = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert shown == module.replace(".wsgi", ".asgi")


@pytest.mark.parametrize(("module", "name"), MOVABLE, ids="{0[0]}:{0[1]}".format)
def test_type_hints_resolve(module: str, name: str) -> None:
    value = getattr(_module(module), name)
    typing.get_type_hints(value, include_extras=True)


def _exceptions() -> list[type[BaseException]]:
    found: dict[type[BaseException], None] = {}
    for module, name in CLASSES:
        value = getattr(_module(module), name)
        if issubclass(value, BaseException):
            found[value] = None
    return list(found)


def _sample(cls: type[BaseException]) -> BaseException:
    request = httpx.Request("GET", "https://example.test/a")
    samples: dict[str, dict[str, object]] = {
        "AttemptStalledError": {"request": request},
        "AttemptTimeoutError": {"request": request, "elapsed": 1.5, "timeout": 1.0},
        "TotalTimeoutError": {"request": request, "elapsed": 3.0, "timeout": 2.5},
        "BrokenCircuitError": {"retry_after": 4.0},
        "RateLimitedError": {"retry_after": 0.5, "reason": "rate_limit"},
        "ResponseTooLargeError": {"limit": 1024},
    }
    extra = samples.get(cls.__name__, {})
    return cls("it failed", **extra)


def _state(value: object) -> dict[str, object]:
    """`vars(value)`, a request by what it asks (httpx requests have no `==`)."""
    return {
        key: (item.method, item.url) if isinstance(item, httpx.Request) else item
        for key, item in vars(value).items()
    }


@pytest.mark.parametrize("cls", _exceptions(), ids=lambda cls: cls.__qualname__)
def test_an_exception_pickles_round_trip(cls: type[BaseException]) -> None:
    error = _sample(cls)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert str(again) == str(error)
    assert again.args == error.args
    assert _state(again) == _state(error)
    assert f"{cls.__module__}.{cls.__qualname__}" in repr(type(again))
    assert "._" not in cls.__module__


def _models() -> list[type[pydantic.BaseModel]]:
    found: list[type[pydantic.BaseModel]] = []
    for module, name in CLASSES:
        value = getattr(_module(module), name)
        if (
            issubclass(value, pydantic.BaseModel)
            and not value.__pydantic_generic_metadata__["parameters"]
        ):
            try:
                value()
            except (pydantic.ValidationError, TypeError):
                continue  # a model with required fields: not an options model
            found.append(value)
    return found


MODELS = _models()


def test_the_options_models_are_among_those_checked() -> None:
    names = {model.__name__ for model in MODELS}
    assert {
        "HttpResilienceOptions",
        "RetryOptions",
        "ResilienceMediatorOptions",
    } <= names


def _fields(options: pydantic.BaseModel) -> dict[str, object]:
    """The fields; a callable by its name, an object without `==` by its type.

    A pickled `random.random` is another Random's method, a pickled clock
    another clock.
    """
    return {name: _comparable(value) for name, value in vars(options).items()}


def _comparable(value: object) -> object:
    if callable(value):
        return getattr(value, "__qualname__", value)
    if type(value).__eq__ is object.__eq__:
        return type(value)
    return value


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__qualname__)
def test_an_options_model_validates_copies_and_pickles(
    model: type[pydantic.BaseModel],
) -> None:
    options = model()
    for again in (pickle.loads(pickle.dumps(options)), copy.deepcopy(options)):
        assert type(again) is model
        assert _fields(again) == _fields(options)
    assert _fields(model.model_validate(options.model_dump())) == _fields(options)
    assert model.__pydantic_complete__


def test_the_standard_options_still_read_durations() -> None:
    from http_resilience import HttpResilienceOptions

    options = HttpResilienceOptions.model_validate({"attempt_timeout": "250ms"})
    assert options.attempt_timeout == timedelta(milliseconds=250)
    assert repr(HttpResilienceOptions) == (
        "<class 'http_resilience.HttpResilienceOptions'>"
    )
    assert pickle.loads(pickle.dumps(options)) == options
