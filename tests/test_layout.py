"""The house rules, checked on the source: compose, don't reach in.

- no module imports another module's underscore names;
- no class overrides an underscore method of a base class (its own or a library's);
- every module stays readable (under ~400 lines).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import pytest

import benchmarks
import bionemo_wds


def compiled(module: str) -> bool:
    """Whether `module` is a C extension (`setup.py` builds them in place): no Python source to read."""
    spec = importlib.util.find_spec(module)
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


#: Every module of the package and of the benchmark (a top-level package beside it, outside the wheel).
ALL_MODULES = sorted(
    name
    for package in (bionemo_wds, benchmarks)
    for _, name, _ in pkgutil.walk_packages([str(Path(package.__file__).parent)], prefix=f"{package.__name__}.")
    if not name.endswith("__main__")
)
#: Those written in Python (the C extensions have no source to read).
MODULES = [name for name in ALL_MODULES if not compiled(name)]


def _private(name: str) -> bool:
    """An underscore name that is not a dunder (``__x__``) nor one of Enum's sunders (``_x_``),
    which the language and the enum machinery define, not a base class's author."""
    return name.startswith("_") and not name.endswith("_")


def _source(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_another_modules_underscore_names(module):
    tree = ast.parse(_source(module).read_text())
    reached = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if _private(alias.name)
    ]
    assert not reached, f"{module} imports private names: {reached}"


@pytest.mark.parametrize("module", MODULES)
def test_no_class_overrides_an_underscore_method_of_its_bases(module):
    mod = importlib.import_module(module)
    overridden = []
    for _, cls in inspect.getmembers(mod, inspect.isclass):
        if cls.__module__ != mod.__name__:
            continue
        for name in vars(cls):
            if _private(name) and callable(vars(cls)[name]):
                owners = [base.__qualname__ for base in cls.__mro__[1:] if name in vars(base)]
                if owners:
                    overridden.append(f"{cls.__qualname__}.{name} (defined by {owners[0]})")
    assert not overridden, f"{module} overrides private methods: {overridden}"


def test_the_check_finds_an_override():
    """The rule above can fail: a class that overrides a base's underscore method is found."""

    class Base:
        def _hook(self) -> None:
            pass

    class Child(Base):
        def _hook(self) -> None:
            pass

    assert [b for b in Child.__mro__[1:] if "_hook" in vars(b)] == [Base]


@pytest.mark.parametrize("module", MODULES)
def test_modules_stay_readable(module):
    lines = len(_source(module).read_text().splitlines())
    assert lines <= 420, f"{module} has {lines} lines; split it by job"


def test_the_command_line_starts_without_torch():
    """`bionemo-wds prepare | inspect | verify | precompute-windows` need no torch: importing it (through
    webdataset) cost 2 s per command; only the Lightning commands and shard writing import it."""
    import subprocess
    import sys

    heavy = "('torch', 'webdataset', 'lightning')"
    code = f"import sys, bionemo_wds.cli.main; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_top_level_name_resolves():
    """`from bionemo_wds import X` works for every name of `__all__` (lazy names: from the module
    that defines them; the loading stages among them, as the removed pipeline shim gave them)."""
    from bionemo_wds.compat import stages

    names = {name: getattr(bionemo_wds, name) for name in bionemo_wds.__all__}
    assert names["tag_dropout"] is stages.tag_dropout and names["untuple"] is stages.untuple
    assert callable(names["encode"]) and names["__version__"] == bionemo_wds.__version__


#: Import roots the framework-free load side must never reach (directly or through another module).
FRAMEWORKS = ("lightning", "pytorch_lightning", "lightning_fabric")


def imported_package_modules(module: str) -> set[str]:
    """The package modules `module` imports anywhere in its source (top level or inside functions)."""
    tree = ast.parse(_source(module).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_load_side_imports_no_framework():
    """Everything `bionemo_wds.load` reaches by import, walked through the package's own modules,
    stays clear of Lightning: `GenomicDataset` is the load side without a framework."""
    seen: set[str] = set()
    todo = [m for m in MODULES if m == "bionemo_wds.load" or m.startswith("bionemo_wds.load.")]
    reached_frameworks = []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in imported_package_modules(module):
            if name.split(".")[0] in FRAMEWORKS:
                reached_frameworks.append((module, name))
            elif name.startswith("bionemo_wds") and importlib.util.find_spec(name) is not None and not compiled(name):
                todo.append(name)
    assert not reached_frameworks, f"the load side imports a framework: {reached_frameworks}"
    assert "bionemo_wds.lightning.datamodule" not in seen


#: The package's own modules (``bionemo_wds.x.y``), for the import graph.
PACKAGE_MODULES = frozenset(["bionemo_wds", *(m for m in ALL_MODULES if m.startswith("bionemo_wds."))])


def package_imports(module: str) -> set[str]:
    """The package modules `module` imports, anywhere in its source: at module level, under
    ``if TYPE_CHECKING``, inside functions; absolute and relative; ``from package import submodule``
    as that submodule, ``from module import name`` as that module. A C extension imports none."""
    if compiled(module):
        return set()
    path = _source(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            named = (f"{base}.{alias.name}" for alias in node.names)
            targets = [name if name in PACKAGE_MODULES else base for name in named]
        else:
            continue
        for target in targets:
            while target and target not in PACKAGE_MODULES:  # ``import a.b.c`` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (module -> the modules it imports) as ``[a, b, ..., a]``, or None."""
    import graphlib

    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_package_has_no_import_circle():
    """No module reaches itself through the package's imports, counting imports inside functions
    and under ``TYPE_CHECKING`` (which hide a circle from the interpreter, not from the reader)."""
    graph = {module: package_imports(module) for module in sorted(PACKAGE_MODULES)}
    cycle = import_cycle(graph)
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


def test_the_circle_check_finds_a_circle():
    """The check above can fail: a graph with a circle gives it, in order."""
    cycle = import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert cycle is not None and len(cycle) == 4 and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert import_cycle({"a": {"b"}, "b": set()}) is None
    assert "bionemo_wds.format.manifest" in package_imports("bionemo_wds.format")
