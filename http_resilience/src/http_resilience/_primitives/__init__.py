"""Primitives every package keeps a copy of, since the packages import no other.

Each package's ``_primitives/`` folder is a byte-identical mirror of
tools/primitives/, file for file: edit tools/primitives/ and run
``python tools/copy_primitives.py``; never edit a copy (``--check``, run by
``make lint``, fails on a copy that differs, and on a file extra or missing).
A primitive imports only the standard library, pydantic (which every package
requires) and its own folder, relatively; the clock imports anyio too, and only
when it runs off asyncio.
"""
