"""Opening the chat database: file permissions, SQLite pragmas, schema migrations and error translation.

One Engine per file. Every pooled connection gets WAL (the GUI thread reads while the generation thread writes),
a busy timeout (a writer waits for another instead of failing at once) and foreign keys (deleting a conversation
deletes its messages). The schema is brought to the head Alembic revision on every open, so a database written by
an older specchat is migrated in place, never dropped, after a copy of it is kept (backups.py).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import URL, Connection, Engine, create_engine, event, exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from ..core.errors import DatabaseDamaged, DatabaseLocked, DatabaseUnusable, StorageError
from ..core.paths import data_dir
from .backups import back_up

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "0008_awaiting_costs"
DEFAULT_BUSY_TIMEOUT_MS = 5000
CASEFOLD_FUNCTION = "specchat_casefold"  # SQL function registered on every connection, used by search
_WRITE_OPTION = "specchat_write"  # execution option: begin with BEGIN IMMEDIATE


def default_database_path() -> Path:
    """Where the chat history lives: specchat.db in the user data folder (core.paths.data_dir: $SPECCHAT_DATA_DIR for
    tests and portable installs, else the OS's)."""
    return data_dir() / "specchat.db"


@dataclass(frozen=True)
class Database:
    """An open chat database: its path, its Engine, and session factories for reading and for writing.

    Write sessions start with BEGIN IMMEDIATE, taking SQLite's write lock up front. A deferred transaction that
    reads and then writes (add_message reads the next position, then inserts) can otherwise fail at once with
    "database is locked" when another thread committed in between, without waiting for the busy timeout.
    """

    path: Path
    engine: Engine
    read_session: sessionmaker[Session]
    write_session: sessionmaker[Session]

    def close(self) -> None:
        """Close the pooled connections (checkpointing the WAL into the main file when the last one closes)."""
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def open_database(path: Path, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Database:
    """Open (creating if needed) the database at `path`, migrated to the head revision and checked.

    A file at an older revision is copied first (backups.back_up: `backups` beside it, the newest three kept).
    Raises DatabaseLocked (another program holds it), DatabaseDamaged (not a database, or a damaged page) or
    DatabaseUnusable (from a newer specchat, an upgrade that failed, a backup that could not be made, a folder that
    cannot be written); all are StorageErrors, and all leave the file as it was.
    """
    path = Path(path).expanduser().resolve()
    _prepare_file(path)
    engine = _create_engine(path, busy_timeout_ms)
    try:
        with translate_errors(path):
            _back_up_if_older(engine, path)
            _upgrade_to_head(engine, path)
            _check_pages(engine, path)
    except BaseException:
        engine.dispose()
        raise
    return Database(
        path=path,
        engine=engine,
        read_session=sessionmaker(engine, expire_on_commit=False),
        write_session=sessionmaker(engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False),
    )


def _prepare_file(path: Path) -> None:
    """Create the folder (0o700) and the file (0o600): chats are private, other local users must not read them.

    The mode is also enforced on an existing file, e.g. one copied from elsewhere with looser permissions. SQLite
    gives its -wal and -shm files the permissions of the main file. The default folder is specchat's own, so an
    existing one is tightened too (its name tells: a database the user put in a folder of theirs leaves it be).
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.parent == default_database_path().parent and os.name == "posix":
            os.chmod(path.parent, 0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
    except OSError as error:
        raise DatabaseUnusable(f"cannot create the database at {path}: {error.strerror or error}") from error


def _create_engine(path: Path, busy_timeout_ms: int) -> Engine:
    """One Engine on the file, its connections shared between threads (one thread at a time, via the pool)."""
    url = URL.create("sqlite", database=str(path))  # URL.create escapes odd characters in the path
    engine = create_engine(url, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _make_on_connect(busy_timeout_ms))
    event.listen(engine, "begin", _on_begin)
    return engine


def _make_on_connect(busy_timeout_ms: int):
    def on_connect(dbapi_connection: sqlite3.Connection, connection_record) -> None:
        """Set the pragmas on each new connection, and take transaction control away from the sqlite3 module.

        sqlite3 would otherwise emit its own BEGIN lazily (and never BEGIN IMMEDIATE); _on_begin emits it instead.
        busy_timeout comes first so that switching to WAL also waits for a lock rather than failing.
        """
        dbapi_connection.isolation_level = None
        dbapi_connection.create_function(CASEFOLD_FUNCTION, 1, _casefold, deterministic=True)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    return on_connect


def _casefold(value):
    """Unicode-aware case folding for search: SQLite's own LIKE and lower() only fold ASCII letters."""
    return value.casefold() if isinstance(value, str) else value


def _on_begin(connection: Connection) -> None:
    """BEGIN IMMEDIATE for write sessions and migrations, a plain (deferred) BEGIN for reads."""
    immediate = connection.get_execution_options().get(_WRITE_OPTION, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def alembic_config(connection: Connection) -> Config:
    """An Alembic Config for our migrations that runs on `connection` (no alembic.ini: the app owns the file).

    Tests use it to build a database at an older revision: command.upgrade(alembic_config(conn), "0001_initial").
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def _back_up_if_older(engine: Engine, path: Path) -> None:
    """Copy the database before a migration changes it: only a file at a revision older than the head (not a new
    empty file, not one at the head, not one from a newer specchat, which is refused unchanged)."""
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    if revision is None or revision == HEAD_REVISION:
        return
    known = {script.revision for script in ScriptDirectory.from_config(alembic_config(None)).walk_revisions()}
    if revision in known:
        back_up(engine, path, revision)


def _upgrade_to_head(engine: Engine, path: Path) -> None:
    """Migrate to head in one transaction, with foreign keys off while it runs.

    SQLite alters a table by copying it and dropping the original; with foreign keys on, dropping `conversations`
    would cascade-delete every message. The pragma is a no-op inside a transaction, so it is switched on the raw
    connection before BEGIN, and the result is checked with foreign_key_check before committing.
    """
    with engine.connect().execution_options(**{_WRITE_OPTION: True}) as connection:
        raw = connection.connection.dbapi_connection
        raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with connection.begin():
                command.upgrade(alembic_config(connection), "head")
                if connection.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
                    raise DatabaseUnusable(f"migrating the database at {path} broke references between tables; "
                                       "it was left unchanged")
        except CommandError as error:
            raise DatabaseUnusable(f"the database at {path} was written by a newer specchat ({error}); "
                               "update specchat, or move the file away to start a new one") from error
        except (sa_exc.DBAPIError, sqlite3.Error) as error:
            if classify_error(error, path)[0] is not None:
                raise  # locked, damaged, unreadable: translate_errors says which
            # Any other failure of a migration step (a table that exists without a recorded version, a half-applied
            # upgrade): the transaction is rolled back, so the file is as it was.
            detail = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            raise DatabaseUnusable(f"the database at {path} could not be upgraded ({detail}); it was left unchanged. "
                               "Move it away to start a new one") from error
        finally:
            raw.execute("PRAGMA foreign_keys=ON")


def _check_pages(engine: Engine, path: Path) -> None:
    """SQLite's quick_check (every page's structure, not the indexes' contents: milliseconds for a chat database).

    A file can open and migrate with a damaged page that only a later read or write runs into, mid-session; caught
    here, the app moves the file aside at startup instead (ui/app.py)."""
    with engine.connect() as connection:
        problems = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise DatabaseDamaged(f"the database at {path} is damaged ({problems[0]}); move it away to start a new one",
                              detail=problems[0])


def quarantine(path: Path, now: datetime | None = None) -> Path:
    """Moves a damaged database aside, with its -wal and -shm files, as <name>.corrupt-<date>; returns the new path.

    The copy is kept, not deleted: `sqlite3 <copy> .recover` can often get most of the chats back from it."""
    path = Path(path)
    stamp = (now or datetime.now()).strftime("%Y-%m-%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{number}")
    try:
        for suffix in ("-wal", "-shm"):  # companions first: the main file's name is the one a reader looks for
            companion = path.with_name(path.name + suffix)
            if companion.exists():
                os.replace(companion, target.with_name(target.name + suffix))
        os.replace(path, target)
    except OSError as error:
        raise DatabaseUnusable(f"the damaged database at {path} could not be moved aside "
                               f"({error.strerror or error}); move it away by hand") from error
    return target


@contextmanager
def translate_errors(path: Path) -> Iterator[None]:
    """Turn SQLite errors the user can act on into a StorageError that says what to do; re-raise the others."""
    try:
        yield
    except (sa_exc.DBAPIError, sqlite3.Error) as error:
        kind, message = classify_error(error, path)
        if kind is None:
            raise
        raise kind(message, detail=str(getattr(error, "orig", None) or error).strip()) from error


def classify_error(error: BaseException, path: Path) -> tuple[type[StorageError] | None, str | None]:
    """(the StorageError subclass, its message) for a damaged, locked or unusable database; (None, None) else."""
    original = getattr(error, "orig", None) or error
    detail = str(original).strip()
    lowered = detail.lower()
    if "database is locked" in lowered or "database is busy" in lowered:
        return DatabaseLocked, (f"the database at {path} is in use by another program, such as a second specchat "
                                f"({detail}); close it and try again")
    if any(s in lowered for s in ("file is not a database", "malformed", "file is encrypted", "corrupt")):
        return DatabaseDamaged, f"the database at {path} is damaged ({detail}); move it away to start a new one"
    if any(s in lowered for s in ("unable to open", "readonly database", "disk i/o error", "disk is full")):
        return StorageError, (f"cannot use the database at {path} ({detail}); check the folder's permissions and "
                              "free space")
    return None, None
