"""Which modules a module's import runs, read from its source without running it.

E006 (``custom_names``) asks which modules a worker imports when it imports the
tasks modules: those a web process imported first (from a view) declared their
tasks under the view's import, so the tasks modules' own import statements say.
Read: module-level ``import`` and ``from ... import`` statements (in ``if``, ``try``,
``with`` and class bodies too; not in a branch that never runs: ``if TYPE_CHECKING:``,
``if False:``, ``f() if 0 else ...``, ``False and f()``), the module's own
functions that its module-level code calls, and ``importlib.import_module()``,
``__import__()`` (and its ``fromlist``) and ``autodiscover_modules()`` calls, by
keyword or under another name too. A name computed at run time is ``"shop.*"``
(any module under its literal start) or ``"*"`` (any module). The source comes
through the module's loader (its coding declaration, a zip file); a module without
one (a ``.pyc`` alone, a C extension) may import any module: ``"*"``. What a file
says is kept while its path, inode, ctime, mtime and size stay the same, so a
refused enqueue reads only what changed.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
from typing import Any

from django.apps import apps


@dataclasses.dataclass(frozen=True, slots=True)
class _Facts:
    """What a module's source says it imports: read once for each version of its file."""

    #: The modules named by ``import``, ``from ... import`` and ``import_module()`` calls,
    #: and their packages (``import shop.helpers`` runs ``shop`` first).
    modules: tuple[str, ...]
    #: The packages of its ``from ... import *``: their ``__all__`` is read when asked.
    starred: tuple[str, ...]
    #: The names of its ``autodiscover_modules()`` calls: each installed app's, when asked.
    discovered: tuple[str, ...]


#: For each module read: its file as it was read (path, inode, ctime, mtime, size), and
#: what it says.
_read: dict[str, tuple[tuple[Any, ...], _Facts | None]] = {}


def imports(name: str) -> list[str]:
    """The modules ``name``'s import runs: its packages, and those its module-level
    import statements name (not those of its functions, which a worker may never
    call, unless its module-level code calls them; nor those of branches that never
    run, ``if False:``), or ``importlib.import_module()``, ``__import__()`` or
    ``autodiscover_modules()`` calls. The source is read again only when its file
    changes."""
    found = [name.rpartition(".")[0]] if "." in name else []
    spec = _spec(name)
    if getattr(spec, "loader", None) is None:
        return found  # not found: no worker imports it either
    version = _version(spec)
    cached = _read.get(name)
    if cached is None or cached[0] != version:
        cached = _read[name] = (version, _facts(name, spec))
    facts = cached[1]
    if facts is None:  # a .pyc without its source, a C extension: it may import any
        return [*found, "*"]
    asked = [f"{at}.{n}" for at in facts.starred for n in _names(at)]
    asked += [f"{app.name}.{n}" for app in apps.get_app_configs() for n in facts.discovered]
    return [*found, *facts.modules, *(part for full in asked for part in _with_packages(full))]


def _version(spec: Any) -> tuple[Any, ...]:
    """The file a module's source comes from as it is now: its path, inode, ctime,
    mtime and size (of the zip file, for a module imported from one); its path alone,
    read once for the process, when it has none. The inode and ctime tell a file
    replaced by one of its size whose mtime was kept (``tar``, ``cp -p``): no
    program sets a ctime."""
    places = [spec.origin, getattr(spec.loader, "archive", None)]
    for place in (p for p in places if isinstance(p, str)):
        with contextlib.suppress(OSError):
            found = os.stat(place)
            changed = (found.st_ino, found.st_ctime_ns, found.st_mtime_ns, found.st_size)
            return (spec.origin, place, *changed)
    return (spec.origin,)


def _facts(name: str, spec: Any) -> _Facts | None:
    """Read ``name``'s source; None when it has none to read."""
    try:  # through its loader: its coding declaration, a zip file
        source = spec.loader.get_source(spec.name)
    except Exception:  # a loader of its own: nothing to tell from
        source = None
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _Facts((), (), ())  # a worker's import fails too
    is_package = spec.submodule_search_locations is not None
    base = name if is_package else name.rpartition(".")[0]
    # Its own functions, read where module-level code calls them (``_load()``).
    local = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    aliases = _aliases(tree)
    modules: list[str] = []
    starred: list[str] = []
    discovered: list[str] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            with contextlib.suppress(ImportError, ValueError):
                at = importlib.util.resolve_name("." * node.level + (node.module or ""), base)
                modules += [at, *(f"{at}.{a.name}" for a in node.names if a.name != "*")]
                starred += [at] if any(a.name == "*" for a in node.names) else []
        elif isinstance(node, ast.Call):
            called = _imported_by_call(node, name, base, aliases)
            discovered += [n.removeprefix(_EACH_APP) for n in called if n.startswith(_EACH_APP)]
            modules += [n for n in called if not n.startswith(_EACH_APP)]
            todo += ast.iter_child_nodes(node)
            function = local.pop(getattr(node.func, "id", ""), None)
            todo += function.body if function is not None else []
        elif isinstance(node, ast.If | ast.IfExp | ast.While):
            todo += _run_branches(node)
        elif isinstance(node, ast.BoolOp):
            todo += _run_operands(node)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # try/with and class bodies at module level run as the module does
            todo += ast.iter_child_nodes(node)
    packages = (part for full in modules for part in _with_packages(full))
    return _Facts(tuple(packages), tuple(starred), tuple(discovered))


def _truth(test: ast.expr) -> bool | None:
    """What a test is at run time, when its source says it (``False``, ``0``, ``not
    0``, ``TYPE_CHECKING``, which is False when a module runs, ``__name__ ==
    "__main__"``, False when it is imported, and ``and``/``or`` of these); None when
    only the run can tell."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq | ast.NotEq):
        # ``__name__ == "__main__"``: never so when a worker imports the module.
        sides = [test.left, *test.comparators]
        names = {getattr(side, "id", None) for side in sides}
        if len(sides) == 2 and "__name__" in names and _is_text(sides, "__main__"):
            return isinstance(test.ops[0], ast.NotEq)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        # One true operand makes an ``or`` true, one false an ``and`` false, wherever it
        # stands (``x and TYPE_CHECKING`` is false whatever ``x`` is); all known, the other.
        values = [_truth(value) for value in test.values]
        decides = isinstance(test.op, ast.Or)
        if decides in values:
            return decides
        return None if None in values else not decides
    return None


def _is_text(nodes: list[ast.expr], text: str) -> bool:
    return any(isinstance(node, ast.Constant) and node.value == text for node in nodes)


def _run_branches(node: ast.If | ast.IfExp | ast.While) -> list[ast.AST]:
    """What of an ``if`` (statement or expression) or ``while`` may run: the test, and
    the branches its value allows (both, when only the run can tell)."""
    truth = _truth(node.test)
    body = node.body if isinstance(node.body, list) else [node.body]
    orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
    return [node.test, *(body if truth is not False else []), *(orelse if not truth else [])]


def _run_operands(node: ast.BoolOp) -> list[ast.AST]:
    """The operands of ``a and b`` that may run: up to the first whose known value
    stops it (``False and f()`` never calls ``f``)."""
    stops = isinstance(node.op, ast.Or)
    run: list[ast.AST] = []
    for value in node.values:
        run.append(value)
        if _truth(value) is stops:
            break
    return run


def _names(at: str) -> list[str]:
    """The names ``from at import *`` imports beside ``at``: those of its ``__all__``
    (what else the package holds here, its submodules a view imported, say, a
    worker's import does not bind)."""
    listed = getattr(sys.modules.get(at), "__all__", ())
    return [name for name in listed if isinstance(name, str)]


#: Marks a name of ``autodiscover_modules()``: that module of each installed app.
_EACH_APP = "<each app>."


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
        return [f"{_EACH_APP}{text}" for text in names]
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
