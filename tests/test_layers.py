"""The package's shape, checked: which module imports which (no cycle but the ones listed), and which module
reaches into another module's private names (none but the ones listed).

Both lists are ratchets: a new cycle or a new private reach fails, and so does an entry that no longer
occurs (delete it from the list: the list only shrinks). The source is read with `ast`, nothing is run.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import timerwheel

PACKAGE = Path(timerwheel.__file__).parent

# The compiled builds of a module stand for its source (`_engine._scheduler_c` is `_engine/scheduler.py`
# compiled; `_core._wheel_c` is the Cython twin of `_core/wheel.py`).
FOLDED = {
    "_engine._scheduler_c": "_engine.scheduler",
    "_drivers._base_c": "_drivers.base",
    "_core._wheel_c": "_core.wheel",
}

# Import cycles that exist today (each a set of modules).
ALLOWED_CYCLES = [
    # the testing package loads its simulation lazily, and the simulation takes VirtualTimeLoop from it
    {"testing", "testing.simulate"},
]

# A named tuple's own public methods (their underscore keeps them apart from the fields).
NAMEDTUPLE = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}

# (module, name): a private name of another module that a module uses today.
ALLOWED_PRIVATE = {
    ("_drivers.asyncio", "_thread_id"),
    ("_drivers.base", "_is_coroutine_marker"),
    # HandleBase is the asyncio driver's TimerHandle and timeout_reschedule its Timeout's reschedule,
    # compiled in the base: they call their driver's own methods, as the driver's code does, and the
    # driver hands a handle to the loop's own timers when it closes
    ("_drivers.asyncio", "_fallback"),
    ("_drivers.asyncio", "_on_loop"),
    ("_drivers.base", "_arm_timer"),
    ("_drivers.base", "_disarm_if_idle"),
    ("_drivers.base", "_loop"),
    ("_drivers.base", "_thread"),
    ("_drivers.base", "_store"),
    ("_drivers.base", "_thread_id"),
    ("_drivers.base", "_time"),
    ("_engine.scheduler", "_add_id"),
    ("_engine.scheduler", "_cancel_id"),
    ("_engine.scheduler", "_move_id"),
    ("_drivers.threaded", "_is_owned"),
    ("testing._oracle", "_table"),
    ("testing.simulate", "_ready"),
    ("testing.simulate", "_scheduled"),
    ("testing.simulate", "_virtual"),
}


def modules() -> Iterator[tuple[str, ast.Module]]:
    """Every Python module of the package: its dotted name below timerwheel, and its tree."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__") or "__init__"
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The package modules an `from ... import ...` in `module` reaches (relative or absolute)."""
    if node.level:
        base = module.split(".")
        is_package = (PACKAGE / Path(*module.split("."))).is_dir() or module == "__init__"
        base = base if is_package else base[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        if module == "__init__":
            base = []
        stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
    elif node.module and node.module.startswith("timerwheel"):
        stem = node.module.removeprefix("timerwheel").lstrip(".")
    else:
        return []
    targets = []
    for alias in node.names:
        sub = f"{stem}.{alias.name}" if stem else alias.name
        known = {name for name, _ in _ALL} | set(FOLDED)
        targets.append(sub if sub in known else (stem or "__init__"))
    return [FOLDED.get(t, t) for t in targets]


_ALL = list(modules())
MODULES = {part for name in [*(n for n, _ in _ALL), *FOLDED] for part in name.split(".")}


def imports() -> dict[str, set[str]]:
    """module: the package modules it imports (at the top, in a function, or for type checkers)."""
    graph: dict[str, set[str]] = {name: set() for name, _ in _ALL}
    for name, tree in _ALL:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                graph[name].update(t for t in _resolve(name, node) if t != name and t != "__init__")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("timerwheel."):
                        target = alias.name.removeprefix("timerwheel.")
                        graph[name].add(FOLDED.get(target, target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, names and attributes it assigns, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and ast.unparse(node.value) in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return {n for n in names if isinstance(n, str) and n.startswith("_")}


def private_reach() -> set[tuple[str, str]]:
    """(module, name): an `x._name` (x not self or cls), a `getattr(x, "_name")` or a `from m import _name`
    in a module that does not define `_name` itself."""
    pxd = {
        src: set(re.findall(r"\b(_[a-z]\w*)\b", (PACKAGE / f"{pxd.replace('.', '/')}.pxd").read_text()))
        for pxd, src in FOLDED.items()
        if (PACKAGE / f"{pxd.replace('.', '/')}.pxd").exists()
    }
    found: set[tuple[str, str]] = set()
    for name, tree in _ALL:
        own = _defined(tree) | pxd.get(name, set())
        for node in ast.walk(tree):
            used: list[str] = []
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in ("self", "cls", "super()"):
                used.append(node.attr)
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("timer")):
                used += [alias.name for alias in node.names if alias.name not in MODULES]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                used.append(node.args[1].value)
            found.update(
                (name, n)
                for n in used
                if n.startswith("_") and not n.startswith("__") and n not in own and n not in NAMEDTUPLE
            )
    return found


def test_no_import_cycle_but_the_listed_ones() -> None:
    found = cycles(imports())
    new = [c for c in found if c not in ALLOWED_CYCLES]
    gone = [c for c in ALLOWED_CYCLES if c not in found]
    assert new == [], f"new import cycles: {new}"
    assert gone == [], f"cycles that no longer occur (delete them from ALLOWED_CYCLES): {gone}"


def test_no_module_reaches_into_another_modules_private_names_but_the_listed_ones() -> None:
    found = private_reach()
    new = sorted(found - ALLOWED_PRIVATE)
    gone = sorted(ALLOWED_PRIVATE - found)
    assert new == [], f"new private reaches (offer a public name instead): {new}"
    assert gone == [], f"reaches that no longer occur (delete them from ALLOWED_PRIVATE): {gone}"


def test_the_checks_see_a_cycle_and_a_private_reach() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]
    tree = ast.parse("def f(engine):\n    engine._calls += 1\n    return getattr(engine, '_cal')\n")
    assert _defined(tree) == set()
    assert {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} == {"_calls"}


def _cdef_class(pxd: Path, name: str) -> list[str]:
    """The lines of `cdef class <name>` in a .pxd: its header and its indented body, blanks left out."""
    lines = pxd.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"cdef class {name}\b", line))
    body = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        if line.strip():
            body.append(line.strip())
    return body


def test_the_engines_timer_has_one_layout_in_both_pxd_files_that_declare_it() -> None:
    """The compiled drivers' base extends the engine's Timer as declared in _engine/__init__.pxd; the
    engine is compiled with _scheduler_c.pxd's. A field added to one only would lay HandleBase's fields
    over it."""
    engine = _cdef_class(PACKAGE / "_engine" / "_scheduler_c.pxd", "Timer")
    cimported = _cdef_class(PACKAGE / "_engine" / "__init__.pxd", "Timer")
    assert len(engine) > 1
    assert engine == cimported
