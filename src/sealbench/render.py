"""Renderers: how a document (a report, a comparison, ...) becomes json, md, html or text.

A renderer is a function from the JSON document (the dict the format's model validates) to the
text printed or written. Renderers register with the decorator

    renderer(kind: str, fmt: str, *, context: tuple[str, ...] = ())
        -> Callable[[Renderer], Renderer], where Renderer = Callable[..., str]

    @renderer("report", "md")
    def to_markdown(report: dict[str, Any]) -> str: ...

    @renderer("report", "html", context=("attempts",))
    def report_page(report: dict[str, Any], attempts: Sequence[AttemptView]) -> str: ...

and are looked up with `render(kind, fmt, document, **context) -> str`, where context offers
zero-argument functions for what a renderer takes besides the document (called only when the
chosen renderer takes it); `formats_for(kind)` gives the
CLI's `--format` choices, so a new format is a new renderer, never an `if fmt == ...` in cli.py.

Start-up: the CLI needs the choices when it is imported, and `--help` may not import the
modules renderers live in (they import the ledger, the statistics...: tests/test_startup.py).
So PROVIDERS says, without importing anything, which module registers each (kind, format);
`render` imports that module on first use, and its decorator registers the function. A module
that adds a renderer adds one line here and decorates its function.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Renderer = Callable[..., str]  # (document, **context) -> text

# (kind, format) -> the module whose @renderer(kind, format) function renders it
PROVIDERS: dict[tuple[str, str], str] = {
    ("report", "json"): "sealbench.report",
    ("report", "md"): "sealbench.report",
    ("report", "html"): "sealbench.html",
    ("compare", "text"): "sealbench.compare",
    ("compare", "json"): "sealbench.compare",
    ("compare", "md"): "sealbench.compare",
    ("compare", "html"): "sealbench.html",
    ("leaderboard", "text"): "sealbench.leaderboard",
    ("leaderboard", "md"): "sealbench.leaderboard",
    ("leaderboard", "json"): "sealbench.leaderboard",
    ("leaderboard", "html"): "sealbench.leaderboard",
}

_REGISTERED: dict[tuple[str, str], Renderer] = {}
# (kind, format) -> the context names its renderer takes besides the document
_CONTEXT: dict[tuple[str, str], tuple[str, ...]] = {}


class UnknownRenderer(LookupError):
    """No renderer for this (kind, format): the message names the ones there are."""


def renderer(kind: str, fmt: str, *, context: tuple[str, ...] = ()
             ) -> Callable[[Renderer], Renderer]:
    """Register the decorated function as the renderer of `kind` documents in format `fmt`.
    `context` names what it needs besides the document, passed as keyword arguments (an HTML
    page shows the run's attempts, which the report does not hold: `attempts`). Registering a
    (kind, format) twice is a programming error, raised at import."""
    def register(function: Renderer) -> Renderer:
        key = (kind, fmt)
        if key in _REGISTERED and _REGISTERED[key] is not function:
            raise ValueError(f"a renderer for {kind} {fmt} is registered already "
                             f"({_REGISTERED[key].__module__}.{_REGISTERED[key].__qualname__})")
        _REGISTERED[key] = function
        _CONTEXT[key] = context
        return function
    return register


def kinds() -> list[str]:
    return sorted({kind for kind, _ in PROVIDERS})


def formats_for(kind: str) -> list[str]:
    """The formats `kind` renders to, in the order PROVIDERS lists them (the first is the
    CLI's default where it has none of its own). Imports nothing."""
    found = [fmt for k, fmt in PROVIDERS if k == kind]
    if not found:
        raise UnknownRenderer(f"no renderers for {kind!r}; kinds: {', '.join(kinds())}")
    return found


def lookup(kind: str, fmt: str) -> Renderer:
    """The renderer of (kind, fmt), importing the module that provides it on first use."""
    key = (kind, fmt)
    if key not in PROVIDERS:
        raise UnknownRenderer(f"cannot render {kind} as {fmt!r}: {kind} renders as "
                              f"{', '.join(formats_for(kind))}")
    if key not in _REGISTERED:
        importlib.import_module(PROVIDERS[key])
    if key not in _REGISTERED:
        raise UnknownRenderer(f"{PROVIDERS[key]} was named as the renderer of {kind} {fmt} "
                              "but registers none")
    return _REGISTERED[key]


def render(kind: str, fmt: str, document: dict[str, Any],
           **context: Callable[[], Any]) -> str:
    """`document` (a report, a comparison...) as text in format `fmt`. `context` offers what
    some renderers need besides the document, each as a function called only when the chosen
    renderer takes it (reading a run's attempts costs; json does not need them)."""
    function = lookup(kind, fmt)
    wanted = _CONTEXT.get((kind, fmt), ())
    missing = [name for name in wanted if name not in context]
    if missing:
        raise TypeError(f"rendering {kind} as {fmt} needs {', '.join(missing)}")
    return function(document, **{name: context[name]() for name in wanted})
