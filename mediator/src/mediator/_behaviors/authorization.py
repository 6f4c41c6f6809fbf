"""`@authorize` and `AuthorizationBehavior`: roles and policies, checked per request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, cast

from injector import inject

from mediator._core.behavior import Next, SyncNext
from mediator._core.components import Component, component, type_of
from mediator._core.context import Principal, PrincipalProvider
from mediator._core.errors import ForbiddenError
from mediator._core.requests import Request
from mediator._core.stage import Stage
from mediator._core.wiring import Wiring

__all__ = ["AuthorizationBehavior", "Policy", "authorize", "requirements_of"]

TRequest = TypeVar("TRequest", bound=Request[Any], contravariant=True)
C = TypeVar("C", bound=type[Any])

_REQUIREMENTS = "__mediator_authorize__"


class Policy(ABC, Generic[TRequest]):
    """A named rule that may look at the principal and the request itself.

    `allows` may be ``async def`` (to ask the database who owns an order).
    Policies are built by the injector, so they take ``@inject`` dependencies.

    Example:
        >>> from mediator import Command, Principal
        >>> class CancelOrder(Command[None]):
        ...     owner: str
        >>> class OwnsOrder(Policy[CancelOrder]):
        ...     def allows(self, principal: Principal, request: CancelOrder) -> bool:
        ...         return principal.id == request.owner
    """

    @abstractmethod
    def allows(
        self, principal: Principal, request: TRequest, /
    ) -> bool | Awaitable[bool]:
        """True when `principal` may send `request`."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``@authorize(...)``: any one of `roles`, and every one of `policies`."""

    roles: frozenset[str]
    policies: tuple[type[Policy[Any]], ...]


def authorize(
    *, roles: Iterable[str] = (), policies: Iterable[type[Policy[Any]]] = ()
) -> Callable[[C], C]:
    """Require an authenticated principal with a role and passing policies.

    The principal needs any one of `roles` (when given) and every policy in
    `policies` must allow the request. Several ``@authorize`` on one class (or
    on a class and its bases) must all pass. Without a principal, or on any
    refusal, the send raises `ForbiddenError`.

    Raises:
        TypeError: Neither roles nor policies given, a role that is not a
            string, a policy that is not a `Policy` subclass, or the decorated
            object is not a request class.

    Example:
        >>> from mediator import Command
        >>> @authorize(roles=["admin", "support"])
        ... class RefundOrder(Command[None]):
        ...     order_id: int
    """
    if isinstance(roles, str):
        raise TypeError(
            f"authorize(roles=...) takes a list of role names, not the string "
            f"{roles!r}: write roles=[{roles!r}]"
        )
    role_set = frozenset(roles)
    policy_tuple = tuple(policies)
    if not role_set and not policy_tuple:
        raise TypeError("authorize() needs roles=[...], policies=[...] or both")
    for role in cast("frozenset[object]", role_set):
        if not isinstance(role, str):
            raise TypeError(f"authorize(roles=...) takes role names, got {role!r}")
    for policy in cast("tuple[object, ...]", policy_tuple):
        if not (isinstance(policy, type) and issubclass(policy, Policy)):
            raise TypeError(
                f"authorize(policies=...) takes Policy subclasses, got {policy!r}"
            )
    requirement = Requirement(role_set, policy_tuple)

    def mark(cls: C) -> C:
        target = cast(object, cls)
        if not (isinstance(target, type) and issubclass(target, Request)):
            raise TypeError(
                f"@authorize(...) goes on Command or Query classes, not on {cls!r}"
            )
        own = cls.__dict__.get(_REQUIREMENTS, ())
        setattr(cls, _REQUIREMENTS, (*own, requirement))
        return cls

    return mark


def requirements_of(request_type: type[Any]) -> tuple[Requirement, ...]:
    """Every ``@authorize`` on the type and its bases, bases first."""
    return tuple(
        requirement
        for base in reversed(request_type.__mro__)
        for requirement in base.__dict__.get(_REQUIREMENTS, ())
    )


_Rule = tuple[frozenset[str], list[Component[Policy[Any]]]]


class AuthorizationBehavior:
    """Refuses a request unless its principal meets every ``@authorize``.

    A request type without ``@authorize`` is not checked: the behavior is not
    in its chain at all.
    """

    stage: ClassVar[Stage] = Stage.AUTHORIZATION

    @inject
    def __init__(self, resolver: Wiring, principals: PrincipalProvider) -> None:
        self._resolver = resolver
        self._principals = principals
        self._rules: dict[type[Any], list[_Rule]] = {}

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type carries ``@authorize``.

        Raises:
            UnresolvableDependencyError: One of its policies cannot be built.
        """
        # A policy that cannot be built fails the build.
        return bool(self._rules_of(request_type))

    def _rules_of(self, request_type: type[Any]) -> list[_Rule]:
        try:
            return self._rules[request_type]
        except KeyError:
            rules = self._rules[request_type] = [
                (
                    requirement.roles,
                    [
                        component(
                            self._resolver, policy, kind="policy", method="allows"
                        )
                        for policy in requirement.policies
                    ],
                )
                for requirement in requirements_of(request_type)
            ]
            return rules

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Check, then run the rest of the chain."""
        principal = self._principal_for(request)
        for roles, policies in self._rules_of(type_of(request)):
            _check_roles(request, principal, roles)
            for policy in policies:
                verdict = policy.make().allows(principal, request)
                if policy.is_async:
                    verdict = await cast("Awaitable[bool]", verdict)
                if not verdict:
                    _deny(request, f"policy {policy.cls.__qualname__} refused")
        return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path; an async policy is refused by name."""
        principal = self._principal_for(request)
        for roles, policies in self._rules_of(type_of(request)):
            _check_roles(request, principal, roles)
            for policy in policies:
                if not policy.make_sync().allows(principal, request):
                    _deny(request, f"policy {policy.cls.__qualname__} refused")
        return next()

    def _principal_for(self, request: Any) -> Principal:
        principal = self._principals.current()
        if principal is None:
            _deny(request, "no authenticated principal")
        return principal


def _check_roles(request: Any, principal: Principal, roles: frozenset[str]) -> None:
    if roles and roles.isdisjoint(principal.roles):
        _deny(request, f"requires one of the roles {sorted(roles)}")


def _deny(request: Any, reason: str) -> NoReturn:
    raise ForbiddenError(f"{type(request).__qualname__} refused: {reason}")
