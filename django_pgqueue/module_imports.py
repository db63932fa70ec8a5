"""Which modules a module's import runs, read from its source without running it.

E006 (``custom_names``) asks which modules a worker imports when it imports the
tasks modules: those a web process imported first (from a view) declared their
tasks under the view's import, so the tasks modules' own import statements say.
Read: module-level ``import`` and ``from ... import`` statements (in ``if``, ``try``,
``with`` and class bodies too; not under ``if TYPE_CHECKING:``), the module's own
functions that its module-level code calls, and ``importlib.import_module()``,
``__import__()`` (and its ``fromlist``) and ``autodiscover_modules()`` calls, by
keyword or under another name too. A name computed at run time is ``"shop.*"``
(any module under its literal start) or ``"*"`` (any module). The source comes
through the module's loader (its coding declaration, a zip file); a module without
one (a ``.pyc`` alone, a C extension) may import any module: ``"*"``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
from typing import Any

from django.apps import apps


def imports(name: str) -> list[str]:
    """The modules ``name``'s import runs: its packages, and those its module-level
    import statements name (not those of its functions, which a worker may never
    call, unless its module-level code calls them), or ``importlib.import_module()``,
    ``__import__()`` or ``autodiscover_modules()`` calls."""
    found = [name.rpartition(".")[0]] if "." in name else []
    spec = _spec(name)
    if getattr(spec, "loader", None) is None:
        return found  # not found: no worker imports it either
    try:  # through its loader: its coding declaration, a zip file
        source = spec.loader.get_source(spec.name)
    except Exception:  # a loader of its own: nothing to tell from
        source = None
    if source is None:  # a .pyc without its source, a C extension: it may import any
        return [*found, "*"]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return found  # a worker's import fails too
    is_package = spec.submodule_search_locations is not None
    base = name if is_package else name.rpartition(".")[0]
    # Its own functions, read where module-level code calls them (``_load()``).
    local = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    aliases = _aliases(tree)
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            with contextlib.suppress(ImportError, ValueError):
                at = importlib.util.resolve_name("." * node.level + (node.module or ""), base)
                found += [at, *(f"{at}.{name}" for name in _names(node, at))]
        elif isinstance(node, ast.Call):
            found += _imported_by_call(node, name, base, aliases)
            todo += ast.iter_child_nodes(node)
            called = local.pop(getattr(node.func, "id", ""), None)
            todo += called.body if called is not None else []
        elif isinstance(node, ast.If) and _type_checking(node.test):
            # Not `if TYPE_CHECKING:`'s body: only its else runs (the body of `if not ...:`)
            todo += node.body if isinstance(node.test, ast.UnaryOp) else node.orelse
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # if/try/with and class bodies at module level run as the module does
            todo += ast.iter_child_nodes(node)
    # A dotted name (import shop.helpers) runs each of its packages too.
    return [part for full in found for part in _with_packages(full)]


def _names(node: ast.ImportFrom, at: str) -> list[str]:
    """The names ``from at import ...`` imports; for ``*``, those of ``at``'s ``__all__``
    (what else the package holds here, its submodules a view imported, say, a
    worker's import does not bind)."""
    names = [alias.name for alias in node.names if alias.name != "*"]
    if len(names) < len(node.names):
        listed = getattr(sys.modules.get(at), "__all__", ())
        names += [name for name in listed if isinstance(name, str)]
    return names


def _type_checking(test: ast.expr) -> bool:
    """Whether an ``if``'s test names ``TYPE_CHECKING`` (walked: no recursion)."""
    return any(
        getattr(node, "id", getattr(node, "attr", None)) == "TYPE_CHECKING"
        for node in ast.walk(test)
    )


def _aliases(tree: ast.Module) -> dict[str, str]:
    """The names ``from importlib import import_module as load`` binds, and the like
    (at the top of the module: a walk of the whole tree would double the reading)."""
    known = {"import_module", "autodiscover_modules"}
    return {
        alias.asname: alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in known and alias.asname
    }


def _imported_by_call(call: ast.Call, name: str, base: str, aliases: dict[str, str]) -> list[str]:
    """The module ``import_module("shop.helpers")`` (or ``"..helpers", package=...``,
    or ``__import__``) imports, when its arguments are literal (or ``__name__``,
    ``__package__``); ``"shop.*"`` for ``f"shop.{name}"``, ``"*"`` for a name computed
    otherwise; ``[]`` for any other call."""
    called = call.func
    what = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
    what = aliases.get(what, what)
    if what == "autodiscover_modules":  # each installed app's module of that name
        names = [getattr(arg, "value", None) for arg in call.args]
        if not all(isinstance(text, str) for text in names):
            return ["*"]
        return [f"{app.name}.{text}" for app in apps.get_app_configs() for text in names]
    keywords = {k.arg: k.value for k in call.keywords}
    first = call.args[0] if call.args else keywords.get("name")
    if what not in {"import_module", "__import__"} or first is None:
        return []
    if what == "__import__":
        return _dunder_import(call, first, name, base)
    given = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "package")]
    values = {"__name__": name, "__package__": base}
    texts: list[str] = []
    for arg in [first, *given[:1]]:
        text = arg.value if isinstance(arg, ast.Constant) else values.get(getattr(arg, "id", ""))
        if isinstance(arg, ast.JoinedStr):  # f"shop.{name}": any module named so
            lead = getattr(arg.values[0], "value", "") if arg.values else ""
            text = f"{lead if isinstance(lead, str) else ''}*"
        if not isinstance(text, str):
            return ["*"]  # computed at run time: any module, as far as this can tell
        texts.append(text)
    if not texts[0].startswith("."):
        return [texts[0]]
    with contextlib.suppress(ImportError, ValueError):
        return [importlib.util.resolve_name(texts[0], texts[1] if len(texts) > 1 else "")]
    return ["*"]


def _dunder_import(call: ast.Call, first: ast.expr, name: str, base: str) -> list[str]:
    """``__import__("shop", fromlist=["helpers"])`` (positional too) imports
    ``shop.helpers`` as well; a level or a name not literal: ``"*"``."""
    given = {k.arg: k.value for k in call.keywords}
    fromlist = call.args[3] if len(call.args) > 3 else given.get("fromlist")
    level = call.args[4] if len(call.args) > 4 else given.get("level")
    text = getattr(first, "value", None) if isinstance(first, ast.Constant) else None
    text = {"__name__": name, "__package__": base}.get(getattr(first, "id", ""), text)
    if not isinstance(text, str) or getattr(level, "value", 0) != 0:
        return ["*"]
    if fromlist is None:
        return [text]
    if not isinstance(fromlist, ast.List | ast.Tuple):
        return ["*"]
    names = [getattr(item, "value", None) for item in fromlist.elts]
    if not all(isinstance(item, str) for item in names):
        return ["*"]
    return [text, *(f"{text}.{item}" for item in names if item != "*")]


def projects(name: str) -> bool:
    """Whether ``name`` is a module of the project's own (a source file outside the
    standard library and the installed packages), whose imports E006 follows."""
    spec = _spec(name)
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or not getattr(spec, "has_location", False):
        return False
    return not origin.startswith(_library_places())


@functools.cache
def _library_places() -> tuple[str, ...]:
    places = {sysconfig.get_path(kind) for kind in ("stdlib", "platstdlib", "purelib", "platlib")}
    places.update([*site.getsitepackages(), site.getusersitepackages()])
    places |= {os.path.realpath(place) for place in places if place}
    return tuple(os.path.join(place, "") for place in places if place)


def _spec(name: str) -> Any:
    """``name``'s spec, without importing anything (a module the tasks modules import
    but this process has not, such as the one a task's name names)."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    parent, _, _ = name.rpartition(".")
    if parent and parent not in sys.modules:
        places = getattr(_spec(parent), "submodule_search_locations", None)
        return importlib.machinery.PathFinder.find_spec(name, list(places)) if places else None
    try:
        return importlib.util.find_spec(name)  # its package imported: imports nothing
    except (ImportError, ValueError):
        return None


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
