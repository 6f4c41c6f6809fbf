"""Signing up: a request, its handler, one sync and one async validator."""

from __future__ import annotations

from injector import inject

from mediator import CommandHandler, FieldError, Validator
from tests.mediator.validated.messages import SignUp


class Directory:
    """The names taken so far; bound as an instance by the tests."""

    def __init__(self, *taken: str) -> None:
        self.taken = set(taken)
        self.signed_up: list[str] = []


class SignUpHandler(CommandHandler[SignUp, str]):
    @inject
    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    def handle(self, request: SignUp) -> str:
        self.directory.signed_up.append(request.name)
        return f"welcome {request.name}"


class EmailHasAt(Validator[SignUp]):
    def validate(self, request: SignUp) -> list[FieldError]:
        if "@" not in request.email:
            return [FieldError(("email",), "must contain @")]
        return []


class NameIsFree(Validator[SignUp]):
    """Asks the directory, as a uniqueness check against a database would."""

    @inject
    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    async def validate(self, request: SignUp) -> list[FieldError]:
        if request.name in self.directory.taken:
            return [FieldError(("name",), f"{request.name} is taken")]
        return []
