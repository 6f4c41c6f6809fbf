"""The request of the validated feature, apart from its handler and validators."""

from __future__ import annotations

from mediator import Command


class SignUp(Command[str]):
    name: str
    email: str
    age: int
