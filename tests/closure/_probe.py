"""Import every module of one package inside a fresh virtual environment; report.

Run by the closure tests as `python -I -W error _probe.py PACKAGE [EXTRA_IMPORT ...]`
with the interpreter of the environment under test, where only the standard library
and the package's own closure are installed. `-I` keeps the work tree and the
caller's environment variables off `sys.path`.

An EXTRA_IMPORT is a top-level package only an extra installs: a module whose import
fails because one of them is missing is reported as skipped, not as failed.

Prints one JSON object on standard output.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pkgutil
import sys
import sysconfig
import traceback
from typing import Any


def _is_under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def probe(package_name: str, extra_imports: set[str]) -> dict[str, Any]:
    imported: list[str] = []
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}

    def record(name: str, error: BaseException) -> None:
        missing = getattr(error, "name", None) or ""
        if isinstance(error, ModuleNotFoundError) and (
            missing.partition(".")[0] in extra_imports
        ):
            skipped[name] = missing
        else:
            failed[name] = "".join(traceback.format_exception(error))

    def on_walk_error(name: str) -> None:
        error = sys.exc_info()[1]
        if error is not None:
            record(name, error)

    names = [package_name]
    try:
        package = importlib.import_module(package_name)
    except Exception as error:
        record(package_name, error)
    else:
        # walk_packages imports each subpackage to look inside it.
        for info in pkgutil.walk_packages(
            package.__path__, f"{package_name}.", onerror=on_walk_error
        ):
            if info.name.rpartition(".")[2] != "__main__":
                names.append(info.name)
    for name in names:
        if name in failed or name in skipped:
            continue
        try:
            importlib.import_module(name)
        except Exception as error:
            record(name, error)
        else:
            imported.append(name)

    # Taken before anything below imports more.
    loaded = sorted({name.partition(".")[0] for name in list(sys.modules)})
    # The environment itself and the standard library; nothing else may be imported.
    homes = [
        os.path.realpath(home)
        for home in (
            sys.prefix,
            sysconfig.get_path("stdlib"),
            sysconfig.get_path("platstdlib"),
        )
    ]
    outside = {
        name: os.path.realpath(path)
        for name, module in list(sys.modules.items())
        if name != "__main__"
        and isinstance(path := getattr(module, "__file__", None), str)
        and not any(_is_under(os.path.realpath(path), home) for home in homes)
    }
    distributions = {
        dist.metadata["Name"]: {
            "version": dist.version,
            "requires": list(dist.requires or []),
        }
        for dist in importlib.metadata.distributions()
    }
    return {
        "imported": imported,
        "skipped": skipped,
        "failed": failed,
        "loaded_top_levels": loaded,
        "outside_environment": outside,
        "distributions": distributions,
    }


if __name__ == "__main__":
    package_name, *extra_imports = sys.argv[1:]
    print(json.dumps(probe(package_name, set(extra_imports))))
