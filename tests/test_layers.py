"""specchat/engine, specchat/storage, specchat/training, specchat/server, specchat/remote and specchat/chats stay
Qt-free, so they run headless and are testable without a display."""

import ast
import subprocess
import sys
from pathlib import Path

import specchat

PACKAGE = Path(specchat.__file__).parent
FORBIDDEN = ("PySide6", "qasync", "shiboken6", "specchat.ui")
QT_FREE_LAYERS = ("core", "models", "engine", "storage", "training", "server", "remote", "chats")


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
    code = ("import sys, specchat.engine, specchat.engine.loading.pair, specchat.bench, specchat.chats; "
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


def test_the_error_root_and_the_catalog_load_no_torch():
    """core and models import neither torch nor Qt (pyproject.toml's contracts say so of the code; this says so of
    what importing them actually loads): reaching an error or the catalog costs no engine."""
    code = ("import sys, specchat.core.errors, specchat.core.vocabulary, specchat.core.run_kind, "
            "specchat.models.catalog.entries, "
            "specchat.models.catalog.fit, specchat.models.sources, specchat.models.hub.download; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'PySide6'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_module_names_are_unique_outside_the_ui_and_the_commands():
    """One name means one thing: outside ui/ and commands/ no two modules share a file name, and at most 12
    modules sit directly in engine/ (its rooms are decoding, drafting, backends and loading)."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if path.name == "__init__.py" or parts[0] in ("ui", "commands") or "migrations" in parts:
            continue
        seen.setdefault(path.name, []).append("/".join(parts))
    assert {name: places for name, places in seen.items() if len(places) > 1} == {}
    assert len(list((PACKAGE / "engine").glob("*.py"))) <= 12
