"""The factory's injector scope: only `HttpClientsModule` provides a factory.

Injector reads a class's ``__scope__``; `HttpClientFactory` names `ModuleOnly`,
so injector never builds a factory of its own, which would have none of the
application's clients.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MODULE", "ModuleOnly"]

MODULE: Final = "HttpClientsModule(...) from http_resilience.injector"
NOT_BY_INJECTOR: Final = (
    "HttpClientFactory is provided by HttpClientsModule: add "
    "HttpClientsModule(lambda clients: clients.add(...)) (from "
    "http_resilience.injector) to the Injector's modules. Built by the injector "
    "on its own, it would have none of the application's clients."
)


class ModuleOnly:
    """What injector takes for the factory's scope, so it never builds one itself.

    Injector reads a class's ``__scope__`` and asks that scope for the
    provider of each lookup (``get(key, provider)``). Given the class itself
    to build (injector's implicit binding, or ``bind(HttpClientFactory,
    to=HttpClientFactory)``), it refuses, naming the module; any other
    provider (the module's instance) is handed back as it is. Duck-typed on
    injector's scope protocol: this module never imports injector.
    """

    def get(self, key: object, provider: object) -> object:
        """The provider, unless it would build an `HttpClientFactory` from nothing.

        Raises:
            LookupError: It would; the message names the module to add.
        """
        # Imported here: the factory module names this class as its scope.
        from http_resilience._clients.factory import HttpClientFactory

        if getattr(provider, "_cls", None) is HttpClientFactory:
            raise LookupError(NOT_BY_INJECTOR)
        return provider
