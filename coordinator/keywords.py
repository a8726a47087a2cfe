"""The keywords of a declaration, checked as it is made: a misspelt one is a one-line ValueError naming
where it was given, the keyword and the closest valid one, before the call runs. Without the check a
misspelt keyword is a TypeError, or, where ``**kwargs`` take any name (an operator's aggregates), a
value taken for what it is not, which fails far from the job file's line."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
#: where a call's keywords were given, from the callable's name and the call's arguments by name
Where = Callable[[str, dict[str, Any]], str]


def keywords_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters ``fn`` takes by name (not ``self``, nor its ``*args`` and ``**kwargs``)."""
    return tuple(p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")


def unknown_keyword(where: str, keyword: str, keywords: tuple[str, ...], extra: str = "") -> ValueError:
    """``where: unknown keyword K (did you mean X?)``; with no keyword close enough, the valid ones (and
    ``extra``: what else a keyword may name)."""
    close = difflib.get_close_matches(keyword, keywords, n=1)
    hint = f"did you mean {close[0]}?" if close else f"its keywords: {', '.join(keywords)}{extra}"
    return ValueError(f"{where}: unknown keyword {keyword} ({hint})")


def _named(call: str, _: dict[str, Any]) -> str:
    return call


def checked_keywords(where: Where = _named, takes: tuple[type, str] | None = None) -> Callable[[T], T]:
    """Decorates a declaring function, method or class (its ``__init__``): a keyword it has no parameter
    of is refused by ``unknown_keyword`` before the call. ``where(name, arguments)`` says where the
    keyword was given (default: the callable's name). ``takes``: the type of the values its ``**kwargs``
    take and what they are, so that a keyword with another value is a misspelt parameter, not one of them."""

    def decorate(declared: T) -> T:
        fn = declared.__init__ if isinstance(declared, type) else declared  # type: ignore[misc]
        signature = inspect.signature(fn)
        keywords = keywords_of(fn)
        if takes and not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            raise TypeError(f"{declared!r} takes no **kwargs: its keywords are all named")
        value_type, what = takes or (None, "")
        # positional arguments beyond these are the call's own TypeError, once the keywords pass
        positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in signature.parameters.values())
        call = declared.__name__  # type: ignore[attr-defined]

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = signature.bind_partial(*args[:positional], **{k: v for k, v in kwargs.items() if k in keywords})
            except TypeError:  # a parameter given twice: where is said by the positional ones
                bound = signature.bind_partial(*args[:positional])
            return dict(bound.arguments)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for keyword, value in kwargs.items():
                if keyword not in keywords and not (value_type and isinstance(value, value_type)):
                    raise unknown_keyword(where(call, arguments(args, kwargs)), keyword, keywords,
                                          what and f"; any other {what}")
            return fn(*args, **kwargs)

        if isinstance(declared, type):
            declared.__init__ = checked  # type: ignore[misc]
            return declared
        return checked  # type: ignore[return-value]

    return decorate
