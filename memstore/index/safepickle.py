"""Whoosh keeps parts of its index as pickles (the table of contents, segment lists, block
headers). Unpickling runs whatever the bytes name, so a keyword index that arrives from
somewhere else (committed into a repo with ``git add -f``, dropped into ``.index/`` by a pull)
would run code as the user the moment it is opened. ``harden()`` makes every unpickling inside
Whoosh go through an unpickler that builds only plain data, the classes an index's pickles hold
(codec, schema, field formats, analysers) and the few pure functions a schema names; anything
else fails to load, and a projection that fails to load is rebuilt from the memory files.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from typing import IO, Any

# Plain data pickles name these. (``_codecs.encode`` is how a protocol-2 pickle rebuilds bytes.)
_PLAIN = {
    (module, name) for module in ("builtins", "__builtin__")
    for name in ("set", "frozenset", "list", "dict", "tuple", "bytes", "bytearray", "int", "float", "str", "bool",
                 "complex", "object")
} | {("array", "array"), ("array", "_array_reconstructor"), ("copyreg", "_reconstructor"),
     ("collections", "defaultdict"), ("collections", "OrderedDict"), ("_codecs", "encode")}
# The functions a schema names (its analysers'), all pure: compile a pattern, stem a word.
_FUNCTIONS = {("re", "_compile"), ("whoosh.lang.porter", "stem"), ("memstore.index.terms", "code_forms")}
# Modules whose classes a table of contents, a segment or a schema holds; none of them touches a
# file when built (unlike whoosh.filedb, whoosh.index or whoosh.writing, left out).
_CLASS_MODULES = ("whoosh.codec.", "whoosh.fields", "whoosh.formats", "whoosh.analysis.", "whoosh.columns",
                  "memstore.index.analysis")


class UnsafePickle(pickle.UnpicklingError):
    """A pickle naming something other than plain data or a Whoosh class."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        if (module, name) in _FUNCTIONS:
            return super().find_class(module, name)
        if module.startswith(_CLASS_MODULES) and "." not in name and not name.startswith("_"):
            found = super().find_class(module, name)
            if isinstance(found, type):  # a class; never a function a pickle could call
                return found
        raise UnsafePickle(f"refused to unpickle {module}.{name}")


def load(file: IO[bytes], **_: Any) -> Any:
    return _Unpickler(file).load()


def loads(data: bytes, **_: Any) -> Any:
    # The unpickler reads a file without ``peek`` one opcode at a time, each a call into
    # Python: a posting block of 128 postings took ~20 us against ~5 us for pickle.loads.
    # Through a buffered reader it takes the bytes in one piece; the same unpickler judges them.
    return _Unpickler(io.BufferedReader(io.BytesIO(data))).load()


def _shim() -> types.ModuleType:
    """A stand-in for the ``pickle`` module as Whoosh's modules use it: loading is safe, dumping
    and the exception classes are pickle's own."""
    mod = types.ModuleType("pickle")
    for name in dir(pickle):
        if not name.startswith("__"):
            setattr(mod, name, getattr(pickle, name))
    mod.load = load  # type: ignore[attr-defined]
    mod.loads = loads  # type: ignore[attr-defined]
    mod.Unpickler = _Unpickler  # type: ignore[attr-defined]
    return mod


_SHIM = _shim()
_done = False


def harden() -> None:
    """Route every unpickling of the Whoosh modules imported now, and of those imported later
    (they take ``load``/``loads``/``pickle`` from ``whoosh.compat``), through the safe one."""
    global _done
    if _done:
        return
    import whoosh.compat
    swap = {id(pickle.load): load, id(pickle.loads): loads, id(pickle): _SHIM}
    whoosh.compat.load = load  # type: ignore[attr-defined]
    whoosh.compat.loads = loads  # type: ignore[attr-defined]
    whoosh.compat.pickle = _SHIM  # type: ignore[attr-defined]
    # The modules that import ``pickle`` themselves, or that are loaded already.
    import whoosh.filedb.fileindex
    import whoosh.util.loading

    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "whoosh" or name.startswith("whoosh.")):
            continue
        for attr, value in list(vars(mod).items()):
            new = swap.get(id(value))
            if new is not None:
                setattr(mod, attr, new)
    _done = True


__all__ = ["UnsafePickle", "harden", "load", "loads"]
