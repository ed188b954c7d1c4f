"""The file-system helpers every layer shares, each defined once: writing a file atomically, hashing a file or a
few values, keeping a small JSON object, and checking the free disk space before a large write.

No torch, no Qt, nothing else of specchat: the callers keep their own errors and messages (check_disk_space takes
the error to raise), so a model download, the offline pair's install and a training run still each say what they
did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Mapping

log = logging.getLogger(__name__)

HASH_BLOCK = 8 << 20  # bytes read per step of a file's hash (a cancel or a progress report comes between steps)


# --- atomic writes --------------------------------------------------------------------------------------------------

def staging_path(path: Path) -> Path:
    """Where a file is written before it is renamed over `path`: `.<name>.<pid>.tmp` beside it (the same folder,
    so the rename is atomic; hidden, and one per process)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write_text(path: Path, text: str, mode: int = 0o666, durable: bool = False,
                      make_folder: bool = True) -> None:
    """Writes `text` (UTF-8) to a new file beside `path` and renames it over `path`, so a reader sees the old file
    or the whole new one, never half of it. The staging file is made afresh (O_EXCL, which follows no link), so a
    link planted at its predictable name is removed, never written through. mode: the new file's permissions (0o600
    for a private one); durable: fsync it before the rename (a crash then cannot leave an empty file);
    make_folder: make the folder if needed (a cache's), else a missing folder is an error (a file the user named).
    Raises OSError (the staging file removed) when it cannot write."""
    if make_folder:
        path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(path)
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    try:
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Lets `write` make the file at a staging path beside `path` (torch.save, a JSON lines writer...), then renames
    it over `path`: a half-written file never looks like a finished one. A file already at the staging name (a
    leftover, or a planted link) is removed first. Makes the folder if needed; whatever `write` raises is raised,
    the staging file removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(path)
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    try:
        write(staging)
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


# --- kept JSON objects ----------------------------------------------------------------------------------------------

def read_kept(path: Path) -> dict:
    """A kept JSON object (what was measured or recorded once, to save doing it again); an unreadable, damaged or
    foreign file counts as empty ({}), so it is only measured again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_kept(path: Path, data: dict, what: str) -> None:
    """Keeps `data` in `path` atomically (indented, keys sorted); a read-only or full disk is logged as a warning
    naming `what`, not raised: it only costs the next start the same measurement."""
    try:
        atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError as error:
        log.warning("could not keep %s in %s: %s", what, path, error)


# --- hashes ---------------------------------------------------------------------------------------------------------

def hash_file(path: Path, digest, on_block: Callable[[int], None] | None = None) -> str:
    """The hex digest of the file's bytes, streamed into `digest` (a hashlib object, perhaps already fed a header)
    HASH_BLOCK bytes at a time; on_block(bytes) is called before each block is hashed, where a caller reports
    progress or raises to cancel."""
    with open(path, "rb") as stream:
        while block := stream.read(HASH_BLOCK):
            if on_block is not None:
                on_block(len(block))
            digest.update(block)
    return digest.hexdigest()


def sha256_of_file(path: Path, on_block: Callable[[int], None] | None = None) -> str:
    """The file's sha256 (64 hex digits), streamed: what a downloaded or assembled file is checked against.
    on_block as hash_file's."""
    return hash_file(path, hashlib.sha256(), on_block)


def fingerprint(*parts: object, digits: int = 16) -> str:
    """A short key for some values: the first `digits` hex digits of the sha256 of their texts joined by "|".
    Stable across runs and versions, so what was kept under a key is found again."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:digits]


def file_fingerprint(path: Path, digits: int = 16) -> str:
    """A file's identity without reading it: fingerprint of its resolved path, size and modification time (ns).
    What a cache of something derived from the file (a conversion, its metadata) is keyed by."""
    stat = path.stat()
    return fingerprint(path.resolve(), stat.st_size, stat.st_mtime_ns, digits=digits)


# --- disk space -----------------------------------------------------------------------------------------------------

def check_disk_space(needs: Mapping[Path, int], refuse: Callable[[int, Path, int], Exception]) -> None:
    """needs: {folder: bytes to be written there}; folders on one disk add up, and a folder not made yet counts as
    its nearest existing parent. Raises refuse(needed, place, free), the caller's own error and message, for the
    first disk with less free space than it needs (`place`: the first of its folders, or that parent)."""
    by_disk: dict[int, tuple[Path, int]] = {}
    for folder, needed in needs.items():
        existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
        device = existing.stat().st_dev
        place, total = by_disk.get(device, (existing, 0))
        by_disk[device] = (place, total + needed)
    for place, needed in by_disk.values():
        free = shutil.disk_usage(place).free
        if needed > free:
            raise refuse(needed, place, free)
