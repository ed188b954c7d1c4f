"""specchat/engine, specchat/storage, specchat/training, specchat/server, specchat/remote and specchat/chats stay
Qt-free, so they run headless and are testable without a display."""

import ast
import subprocess
import sys
from pathlib import Path

import specchat

PACKAGE = Path(specchat.__file__).parent
FORBIDDEN = ("PySide6", "qasync", "shiboken6", "specchat.ui")
QT_FREE_LAYERS = ("engine", "storage", "training", "server", "remote", "chats")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level and node.module and node.module.startswith("ui"):
            names.add("specchat.ui")
    return names


def test_no_qt_imports_in_engine_or_storage():
    offenders = []
    for layer in QT_FREE_LAYERS:
        for path in (PACKAGE / layer).rglob("*.py"):
            bad = [name for name in imported_modules(path) if name.split(".")[0] in FORBIDDEN
                   or any(name.startswith(f) for f in FORBIDDEN)]
            if bad:
                offenders.append(f"{path.relative_to(PACKAGE)}: {bad}")
    assert not offenders


def test_importing_the_engine_loads_no_qt():
    code = ("import sys, specchat.engine, specchat.engine.pair, specchat.bench, specchat.chats; "
            "print([m for m in sys.modules if m.split('.')[0] in ('PySide6', 'qasync', 'shiboken6')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_import_graph_has_no_cycles():
    """No module imports, directly or not, a module that imports it back (a package importing its own submodules
    is not a cycle: a submodule importing its package's __init__ would be)."""
    import grimp

    graph = grimp.build_graph("specchat", cache_dir=None)  # no .grimp_cache left in the checkout
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith("specchat") and graph.chain_exists(imported, module):
                cycles.append(f"{module} -> {imported} -> ... -> {module}")
    assert not cycles, "\n".join(cycles)
