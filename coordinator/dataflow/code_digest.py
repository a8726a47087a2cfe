"""A digest of a user's function (a filter, a map, a process function), so that a job's version changes
when the code that shapes its output does, and not when the file around it moves or is re-read.

The digest is taken over the function's bytecode, its constants, the names it reads, and the values of
the plain settings it reads (a module's ``THRESHOLD = 18``, a captured ``limit``); functions it calls from
its own module are followed. Line numbers and file names are left out: moving a function is no change.
Objects that are not plain data (a Spark Column, a client) count by their type alone, since their repr
may hold a memory address that differs in every process.
"""

from __future__ import annotations

import functools
import hashlib
import types
from typing import Any

#: hex characters kept: a version's parts hold one per function
DIGEST_CHARS = 12
#: how deep calls into the same module are followed: enough for helpers of helpers, bounded for cycles
_DEPTH = 4
_PLAIN = (str, int, float, bool, bytes, type(None))


def code_digest(fn: Any) -> str:
    """The digest of ``fn`` (any callable; None: an empty string)."""
    if fn is None:
        return ""
    return hashlib.sha256(repr(_shape(fn, _DEPTH, set())).encode()).hexdigest()[:DIGEST_CHARS]


def _shape(value: Any, depth: int, seen: set[int]) -> Any:
    """What of ``value`` the digest reads: nested tuples of plain data, the same in every process."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (tuple, list)):
        return type(value).__name__, tuple(_shape(v, depth, seen) for v in value)
    if isinstance(value, (set, frozenset)):  # sorted: a set's order follows the process's hash seed
        return "set", tuple(sorted(repr(_shape(v, depth, seen)) for v in value))
    if isinstance(value, dict):
        return "dict", tuple(sorted((repr(_shape(k, depth, seen)), repr(_shape(v, depth, seen)))
                                    for k, v in value.items()))
    if isinstance(value, types.CodeType):
        return ("code", value.co_code, value.co_names, value.co_varnames,
                tuple(_shape(c, depth, seen) for c in value.co_consts))
    if isinstance(value, functools.partial):
        return "partial", _shape(value.func, depth, seen), _shape(value.args, depth, seen), \
            _shape(value.keywords, depth, seen)
    if isinstance(value, types.FunctionType):
        return _function(value, depth, seen)
    if isinstance(value, types.MethodType):
        return "method", _shape(value.__func__, depth, seen)
    return "object", type(value).__module__, type(value).__qualname__


def _function(fn: types.FunctionType, depth: int, seen: set[int]) -> Any:
    if id(fn) in seen or depth <= 0:
        return "function", fn.__module__, fn.__qualname__
    seen = seen | {id(fn)}
    cells = tuple(_shape(c.cell_contents, depth - 1, seen) if _filled(c) else None for c in fn.__closure__ or ())
    read = []
    for name in _names(fn.__code__):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, _PLAIN + (tuple, frozenset)):
            read.append((name, _shape(value, depth - 1, seen)))
        elif isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
            read.append((name, _shape(value, depth - 1, seen)))  # a helper of the job file's own
    return ("function", _shape(fn.__code__, depth, seen), cells, tuple(read),
            _shape(fn.__defaults__ or (), depth - 1, seen), _shape(fn.__kwdefaults__ or {}, depth - 1, seen))


def _names(code: types.CodeType) -> list[str]:
    """The global names ``code`` and the code nested in it (a lambda, a comprehension) read."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return sorted(set(names))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet assigned (a recursive inner function)
        return False
    return True
