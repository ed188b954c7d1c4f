"""A copy of the chat database before a migration changes it.

open_database migrates a file written by an older specchat in place. The migration runs in one transaction, so a
failed one leaves the file as it was; a copy taken first also covers what a transaction cannot: a migration that
succeeds but loses or garbles something, found out later. The copy is made with SQLite's backup API, which reads a
consistent snapshot of the database, WAL included, while other connections may be writing. Copies go to the
`backups` folder beside the database (for the default database: <data dir>/backups), named
`<file stem>-<old revision>-<UTC time>.db`, private (0o600 in a 0o700 folder); the newest KEEP are kept.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import Engine

from ..core.errors import DatabaseUnusable

log = logging.getLogger(__name__)

KEEP = 3  # backups of one database kept, the newest
FOLDER = "backups"
STAMP = "%Y%m%dT%H%M%SZ"
_NAME_TAIL = r"-(?P<revision>\d{4}_\w+)-(?P<stamp>\d{8}T\d{6}Z)(?:-(?P<number>\d+))?\.db"  # after the file stem


def backup_folder(path: Path) -> Path:
    """Where the backups of the database at `path` go: `backups` beside it."""
    return path.parent / FOLDER


def back_up(engine: Engine, path: Path, revision: str, now: datetime | None = None) -> Path:
    """Copy the database at `path` (open through `engine`) into backup_folder(path) as
    <stem>-<revision>-<UTC time>.db, then delete all but the newest KEEP copies of it. Returns the copy's path.

    Raises DatabaseUnusable, saying so, when the copy cannot be made (a folder that cannot be written, a full disk):
    the caller then refuses the upgrade and leaves the database as it was. The copy is written under a hidden name
    and renamed when complete, so a failed one never passes for a backup."""
    folder = backup_folder(path)
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime(STAMP)
    target = _free_name(folder, f"{path.stem}-{revision}-{stamp}")
    staging = folder / f".{target.name}.tmp"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        os.close(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
        _copy(engine, staging)
        os.replace(staging, target)
    except (OSError, sqlite3.Error) as error:
        with contextlib.suppress(OSError):
            staging.unlink()
        reason = getattr(error, "strerror", None) or str(error)
        raise DatabaseUnusable(f"the database at {path} needs an upgrade, but no backup of it could be made in "
                               f"{folder} ({reason}); it was left unchanged. Free some space or make that folder "
                               "writable, then start specchat again") from error
    log.info("backed up the database at %s (revision %s) to %s before upgrading it", path, revision, target)
    _prune(folder, path.stem)
    return target


def _copy(engine: Engine, staging: Path) -> None:
    """SQLite's online backup of the engine's database into the (empty) file at `staging`, in one step."""
    source = engine.raw_connection()
    try:
        destination = sqlite3.connect(staging)
        try:
            source.driver_connection.backup(destination)
        finally:
            destination.close()
    finally:
        source.close()


def _free_name(folder: Path, base: str) -> Path:
    """<base>.db, or <base>-N.db past the highest N already there (several upgrades within one second), so a new
    copy always sorts after the older ones of that second, even once the first of them was pruned."""
    taken = [1 if name == f"{base}.db" else int(name[len(base) + 1:-3])
             for name in (p.name for p in folder.glob(f"{glob.escape(base)}*.db"))
             if name == f"{base}.db" or re.fullmatch(re.escape(base) + r"-\d+\.db", name)]
    return folder / (f"{base}-{max(taken) + 1}.db" if taken else f"{base}.db")


def backups_of(path: Path) -> list[Path]:
    """The backups of the database at `path`, oldest first (by the time in their names, then their number)."""
    pattern = re.compile(re.escape(path.stem) + _NAME_TAIL)
    found = []
    folder = backup_folder(path)
    for candidate in folder.iterdir() if folder.is_dir() else ():
        match = pattern.fullmatch(candidate.name)
        if match and candidate.is_file():
            found.append(((match["stamp"], int(match["number"] or 1)), candidate))
    return [candidate for _, candidate in sorted(found)]


def _prune(folder: Path, stem: str) -> None:
    """Deletes all but the newest KEEP backups of the database named `stem`; one that cannot go is logged."""
    for old in backups_of(folder.parent / f"{stem}.db")[:-KEEP]:
        try:
            old.unlink()
        except OSError as error:
            log.warning("could not delete the old backup %s: %s", old, error.strerror or error)
