"""Which modules a module's import runs, read from its source without running it.

E006 (``custom_names``) asks which modules a worker imports when it imports the
tasks modules: those a web process imported first (from a view) declared their
tasks under the view's import, so the tasks modules' own import statements say.
Read: module-level ``import`` and ``from ... import`` statements (in ``if``, ``try``,
``with`` and class bodies too; not under ``if TYPE_CHECKING:``), the module's own
functions that its module-level code calls, and ``importlib.import_module()``,
``__import__()`` and ``autodiscover_modules()`` calls. A name computed at run time
is ``"shop.*"`` (any module under its literal start) or ``"*"`` (any module).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.machinery
import importlib.util
import sys
from typing import Any

from django.apps import apps


def imports(name: str) -> list[str]:
    """The modules ``name``'s import runs: its packages, and those its module-level
    import statements name (not those of its functions, which a worker may never
    call, unless its module-level code calls them), or ``importlib.import_module()``,
    ``__import__()`` or ``autodiscover_modules()`` calls."""
    found = [name.rpartition(".")[0]] if "." in name else []
    spec = _spec(name)
    origin = getattr(spec, "origin", None)
    try:
        with open(str(origin), encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return found
    is_package = getattr(spec, "submodule_search_locations", None) is not None
    base = name if is_package else name.rpartition(".")[0]
    # Its own functions, read where module-level code calls them (``_load()``).
    local = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
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
            found += _imported_by_call(node, name, base)
            todo += ast.iter_child_nodes(node)
            called = local.pop(getattr(node.func, "id", ""), None)
            todo += called.body if called is not None else []
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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


def _imported_by_call(call: ast.Call, name: str, base: str) -> list[str]:
    """The module ``import_module("shop.helpers")`` (or ``"..helpers", package=...``,
    or ``__import__``) imports, when its arguments are literal (or ``__name__``,
    ``__package__``); ``"shop.*"`` for ``f"shop.{name}"``, ``"*"`` for a name computed
    otherwise; ``[]`` for any other call."""
    called = call.func
    what = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
    if what == "autodiscover_modules":  # each installed app's module of that name
        names = [getattr(arg, "value", None) for arg in call.args]
        if not all(isinstance(text, str) for text in names):
            return ["*"]
        return [f"{app.name}.{text}" for app in apps.get_app_configs() for text in names]
    if what not in {"import_module", "__import__"} or not call.args:
        return []
    given = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "package")]
    values = {"__name__": name, "__package__": base}
    texts: list[str] = []
    for arg in [call.args[0], *given[:1]]:
        text = arg.value if isinstance(arg, ast.Constant) else values.get(getattr(arg, "id", ""))
        if isinstance(arg, ast.JoinedStr):  # f"shop.{name}": any module named so
            lead = getattr(arg.values[0], "value", "") if arg.values else ""
            text = f"{lead if isinstance(lead, str) else ''}*"
        if not isinstance(text, str):
            return ["*"]  # computed at run time: any module, as far as this can tell
        texts.append(text)
    if what == "__import__" or not texts[0].startswith("."):
        return [texts[0]]
    with contextlib.suppress(ImportError, ValueError):
        return [importlib.util.resolve_name(texts[0], texts[1] if len(texts) > 1 else "")]
    return ["*"]


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
