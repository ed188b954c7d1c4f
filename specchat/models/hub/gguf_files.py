"""Downloading one GGUF file of a Hub repository: the quantization the catalog offers on a CPU (catalog/quants.py),
rather than the whole repository, which holds a file per quantization (often 10-20 GB together).

It is snapshots.py's download narrowed to one file, with its helpers: the network opens for the calling thread
only (network_for_this_thread, through models.download_from_hub); one Hub request, GET /api/models/<repo>/revision/
main, gives the commit and the file's LFS sha256 and size, each checked before it names a path (check_commit,
check_blob, check_file_name, inside); the bytes come from /<repo>/resolve/<commit>/<file> into
blobs/<sha256>.incomplete, continued with an HTTP Range after a cut or a cancel; the sha256 is checked before the
file counts as downloaded, and a file that arrives damaged is deleted. Where the catalog pins a file's size or
sha256, a Hub file that differs is refused before any byte is fetched.

The file lands in the Hugging Face cache's layout (blobs/, snapshots/<commit>/<file>, refs/main), or in a models
folder (core.paths.models_dir(), where the offline pair's files live too) as <file>, renamed into place only once
checked. Either way `cached_gguf` finds it without the network, and ModelSource.parse("org/name/file.gguf") loads
it as a "gguf" source."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Callable

from ...core.errors import ModelLoadError
from ...core.fs import atomic_write_text, check_disk_space, sha256_of_file
from ...core.paths import models_dir
from ..catalog.quants import GgufQuant, gguf_name_problem, repo_problem, split_gguf_spec
from .snapshots import (PARTIAL_SUFFIX, ByteCounter, HubFile, Progress, UnsafeHubAnswer, check_blob, check_commit,
                        check_file_name, download_lock, fetch_resuming, hub_endpoint, inside, link_blob,
                        not_enough_space, partial_size, refuse_link, repo_folder)

GGUF_PATTERNS = ("*.gguf", "*.GGUF")
STAGING = ".specchat-downloads"  # in a models folder: blobs/<sha256>.incomplete while a file arrives
_COMMIT = re.compile(r"[0-9a-f]{40}")


def plan_gguf(repo_id: str, file: str) -> tuple[str, HubFile]:
    """The commit `main` points at and the file's size and LFS sha256, from one Hub request; ModelLoadError when
    the repository has no such file or the Hub gives no sha256 to check it by, UnsafeHubAnswer for a value that
    cannot name a path."""
    from huggingface_hub import HfApi, constants

    info = HfApi(endpoint=hub_endpoint()).model_info(repo_id, revision="main", files_metadata=True,
                                                     timeout=constants.HF_HUB_ETAG_TIMEOUT)
    commit = check_commit(info.sha, repo_id)
    siblings = [sibling for sibling in info.siblings or [] if isinstance(sibling.rfilename, str)]
    sibling = next((sibling for sibling in siblings if sibling.rfilename == file), None)
    if sibling is None:
        listed = sorted(s.rfilename for s in siblings if s.rfilename.lower().endswith(".gguf"))
        raise ModelLoadError(f"{repo_id} has no file {file} on {hub_endpoint()} (its GGUF files: "
                             f"{', '.join(listed) or 'none'})")
    check_file_name(file, repo_id, GGUF_PATTERNS)
    if sibling.lfs is None:
        raise ModelLoadError(f"the Hub gives no LFS sha256 for {repo_id}/{file}, so it cannot be checked; nothing "
                             "was downloaded")
    size = sibling.lfs.size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise UnsafeHubAnswer(f"the Hub gave {size!r} as the size of {repo_id}/{file}; nothing was downloaded")
    return commit, HubFile(file, size, check_blob(sibling.lfs.sha256, True, repo_id, file), True)


def check_pin(repo_id: str, file: HubFile, pin: GgufQuant | None) -> None:
    """Refuses a Hub file that is not the one the catalog names (its size or sha256 differ): the repository
    changed since the catalog was written, and what it holds now was not checked."""
    if pin is None:
        return
    for what, pinned, listed in (("sha256", pin.sha256, file.blob), ("size", pin.size, file.size)):
        if pinned is not None and pinned != listed:
            raise ModelLoadError(f"{repo_id}/{file.name} on {hub_endpoint()} has {what} {listed}, not the "
                                 f"{pinned} the catalog names: the repository changed since; nothing was "
                                 "downloaded")


def download_gguf(repo_id: str, file: str, on_progress: Callable[[Progress], None] | None = None,
                  cancel: threading.Event | None = None, folder: Path | None = None,
                  pin: GgufQuant | None = None) -> Path:
    """Downloads one GGUF file, continuing what an earlier try left, and returns its path: in the Hugging Face
    cache (folder None), or folder/<file>. Call it inside network_for_this_thread(); raises DownloadCancelled when
    `cancel` is set (between chunks; what arrived is kept), ModelLoadError for a damaged file (deleted), a pin
    that does not match, or no disk space, and huggingface_hub's or httpx's errors otherwise."""
    problem = repo_problem(repo_id) or (f"{file!r} {gguf_name_problem(file)}" if gguf_name_problem(file) else None)
    if problem:
        raise ModelLoadError(problem)
    commit, hub_file = plan_gguf(repo_id, file)
    check_pin(repo_id, hub_file, pin)
    report = on_progress or (lambda progress: None)
    if folder is None:
        return _into_cache(repo_id, commit, hub_file, report, cancel)
    return _into_folder(repo_id, commit, hub_file, Path(folder), report, cancel)


def _into_cache(repo_id: str, commit: str, file: HubFile, report, cancel) -> Path:
    """blobs/<sha256>, then snapshots/<commit>/<file> linking to it, then refs/main: the layout huggingface_hub
    writes, so that its cache scans see the file; each path checked to lie in the model's cache folder."""
    folder = repo_folder(repo_id)
    target = inside(folder, folder / "snapshots" / commit / file.name)
    blob = inside(folder, folder / "blobs" / file.blob)
    inside(folder, folder / "blobs" / (file.blob + PARTIAL_SUFFIX))
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    with download_lock(folder.parent / ".locks" / folder.name, repo_id):
        if _complete(target, file):
            report(Progress(file.size, file.size, 0, file.name))
        else:
            _fetch_blob(repo_id, commit, file, folder, report, cancel)
            link_blob(blob, target)
        atomic_write_text(inside(folder, folder / "refs" / "main"), commit)
    return target


def _into_folder(repo_id: str, commit: str, file: HubFile, models: Path, report, cancel) -> Path:
    """models/<file>, arriving as models/.specchat-downloads/blobs/<sha256>.incomplete and renamed into place only
    once its sha256 is checked. A different file already there under that name is left alone and refused."""
    models.mkdir(parents=True, exist_ok=True)
    target = inside(models, models / file.name)
    staging = models / STAGING
    blob = inside(staging, staging / "blobs" / file.blob)
    if target.is_file():
        if target.stat().st_size == file.size and sha256_of_file(target) == file.blob:
            report(Progress(file.size, file.size, 0, file.name))
            return target
        raise ModelLoadError(f"{target} is another file (its size or sha256 differ from {repo_id}'s); move it away "
                             "and download again")
    (staging / "blobs").mkdir(parents=True, exist_ok=True)
    with download_lock(staging, repo_id):
        _fetch_blob(repo_id, commit, file, staging, report, cancel)
        os.replace(blob, target)
    return target


def _fetch_blob(repo_id: str, commit: str, file: HubFile, root: Path, report, cancel) -> None:
    """root/blobs/<sha256>: kept if already complete (it was checked when made), else fetched, resuming
    root/blobs/<sha256>.incomplete, and checked (snapshots.fetch_resuming), after a check of the disk space."""
    blob = root / "blobs" / file.blob
    refuse_link(blob)  # a planted link is never kept as the file
    if _complete(blob, file):
        report(Progress(file.size, file.size, 0, file.name))
        return
    kept = partial_size(root, file)
    check_disk_space({root: file.size - kept}, not_enough_space)
    counter = ByteCounter(kept, file.size, report, cancel)
    counter.file = file.name
    report(Progress(kept, file.size, 0, file.name))  # the size, and what is kept
    fetch_resuming(repo_id, commit, file, root / "blobs" / (file.blob + PARTIAL_SUFFIX), counter)


def _complete(path: Path, file: HubFile) -> bool:
    try:
        return path.stat().st_size == file.size  # follows a snapshot's link to its blob
    except OSError:
        return False


# --- finding it without the network ---------------------------------------------------------------------------------

def cached_gguf(repo_id: str, file: str, size: int | None = None) -> Path | None:
    """The downloaded file, found without the network: in the Hugging Face cache (the snapshot refs/main names
    first, then any other), else in the models folder (at `size`, where given); None if it is not there. Only
    complete files are found: a snapshot links to a blob once its sha256 was checked."""
    if repo_problem(repo_id) or gguf_name_problem(file):
        return None
    try:
        folder = repo_folder(repo_id)
    except ModelLoadError:
        return None
    for snapshot in _snapshots(folder):
        path = snapshot / file
        if path.is_file():
            return path
    path = models_dir() / file
    if path.is_file() and (size is None or path.stat().st_size == size):
        return path
    return None


def _snapshots(folder: Path) -> list[Path]:
    try:
        main = (folder / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    try:
        others = sorted((p for p in (folder / "snapshots").iterdir() if p.name != main),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        others = []
    return ([folder / "snapshots" / main] if _COMMIT.fullmatch(main) else []) + others


def catalog_pin(repo_id: str, file: str) -> GgufQuant | None:
    """The catalog's entry for this file (its pinned size and sha256), or None when the catalog does not name it
    (or cannot be read: the Hub's own sha256 still checks the download)."""
    from ..catalog.entries import CatalogError, load_catalog

    try:
        catalog = load_catalog()
    except CatalogError:
        return None
    for entry in catalog.entries:
        if entry.gguf is not None and entry.gguf.repo.lower() == repo_id.lower():
            for quant in entry.gguf.quants:
                if quant.file == file:
                    return quant
    return None


def download_gguf_spec(spec: str, on_progress=None, cancel=None, folder: Path | None = None) -> Path:
    """download_gguf for a spec "org/name/file.gguf", checked against the catalog's pin where it names the file."""
    parts = split_gguf_spec(spec)
    if parts is None:
        raise ModelLoadError(f"{spec!r} is not a GGUF file of a Hub repository (org/name/file.gguf)")
    return download_gguf(*parts, on_progress=on_progress, cancel=cancel, folder=folder, pin=catalog_pin(*parts))
