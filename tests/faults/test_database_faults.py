"""Faults of the database file itself, raised by SQLite on a real file: each case states what the user sees at the
next start (ui/app.py open_store) and what is kept.

- disk full mid-session: the write is refused with a message naming free space; what was saved before stays;
- locked at startup: asked to try again or quit, never silently moved to another file;
- damaged (a foreign header, or a damaged page deep inside): moved aside as .corrupt-<date>, a new one started,
  a banner says where the old one is;
- from a newer specchat / a migration that fails half-way: left byte for byte unchanged; quit or, knowingly, a
  temporary database.
"""

import sqlite3

import pytest
from alembic import command
from sqlalchemy import create_engine, event

from specchat.core.errors import DatabaseDamaged, DatabaseLocked, DatabaseUnusable, StorageError
from specchat.storage import Store, open_database
from specchat.storage.db import HEAD_REVISION, alembic_config
from specchat.ui.app import StartChoice, open_store


def answers(*choices):
    """An ask(kind, message) that answers `choices` in turn, and records what it was asked."""
    asked, pending = [], list(choices)

    def ask(kind, message):
        asked.append((kind, message))
        return pending.pop(0)
    ask.asked = asked
    return ask


def never_asked(kind, message):
    raise AssertionError(f"asked {kind}: {message}")


def a_chat(path, text="kept across the fault"):
    store = Store(open_database(path))
    chat = store.create_conversation("Before")
    store.add_message(chat.id, "user", text)
    store.close()
    return chat.id


def test_disk_full_refuses_the_write_and_keeps_what_was_saved(tmp_path):
    path = tmp_path / "specchat.db"
    chat = a_chat(path)
    store = Store(open_database(path))
    engine = store.database.engine
    engine.dispose()  # every connection from now on sees a disk with no room left for the file to grow

    @event.listens_for(engine, "connect")
    def no_room(dbapi_connection, _record):
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

    with pytest.raises(StorageError, match="free space") as info:
        store.add_message(chat, "assistant", "x" * 200_000)  # needs ~50 more pages
    assert "disk is full" in str(info.value)
    assert [m.text for m in store.messages(chat)] == ["kept across the fault"]
    store.close()
    store, banner = open_store(path, ask=never_asked)  # the next start, with room again: as it was
    assert banner is None and [m.text for m in store.messages(chat)] == ["kept across the fault"]
    store.close()


def hold_exclusive_lock(path):
    """A second connection (another program) holding the write lock of a rollback-journal database."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode=DELETE")
    other.execute("BEGIN EXCLUSIVE")
    return other


def test_a_lock_at_startup_asks_and_a_retry_opens_the_same_file(tmp_path):
    path = tmp_path / "specchat.db"
    chat = a_chat(path)
    other = hold_exclusive_lock(path)

    def release_then_retry(kind, message):
        other.execute("ROLLBACK")  # the user closes the other program, then presses Try again
        other.close()
        return StartChoice.RETRY
    ask = answers(StartChoice.QUIT)
    assert open_store(path, ask=ask, busy_timeout_ms=50) == (None, None)  # Quit: nothing opened, nothing written elsewhere
    assert ask.asked[0][0] == "locked" and "in use by another program" in ask.asked[0][1]
    store, banner = open_store(path, ask=release_then_retry, busy_timeout_ms=50)
    assert store.database.path == path.resolve() and banner is None
    assert [m.text for m in store.messages(chat)] == ["kept across the fault"]
    store.close()


@pytest.mark.parametrize("damage", ["header", "page"])
def test_a_damaged_database_is_moved_aside_and_a_new_one_started(tmp_path, damage):
    path = tmp_path / "specchat.db"
    a_chat(path, "x" * 50_000)  # several pages, so that one deep inside can be damaged
    data = bytearray(path.read_bytes())
    if damage == "header":
        data[:16] = b"not a database!!"
    else:  # a b-tree page past the schema: opens and migrates fine, the damage shows only when read
        page_size = int.from_bytes(data[16:18], "big")
        for page in range(2, len(data) // page_size):
            data[page * page_size:page * page_size + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    with pytest.raises(DatabaseDamaged):
        open_database(path)
    store, banner = open_store(path, ask=never_asked)
    try:
        (moved,) = tmp_path.glob("specchat.db.corrupt-*")
        assert moved.read_bytes() == bytes(data)  # kept as it was, for recovery
        assert str(moved) in banner and ".recover" in banner and "new one" in banner
        assert store.database.path == path.resolve() and store.list_conversations() == []
        store.create_conversation("After")  # the new database works
    finally:
        store.close()


def test_a_database_from_a_newer_specchat_is_left_unchanged(tmp_path):
    path = tmp_path / "specchat.db"
    a_chat(path)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE alembic_version SET version_num = '9999_future'")
    before = path.read_bytes()
    ask = answers(StartChoice.QUIT)
    assert open_store(path, ask=ask) == (None, None)
    assert ask.asked[0][0] == "unusable" and "newer specchat" in ask.asked[0][1]
    store, banner = open_store(path, ask=answers(StartChoice.TEMPORARY))
    try:
        assert store.database.path != path.resolve() and "temporary database" in banner
        assert "will not be kept" in banner
    finally:
        store.close()
    assert path.read_bytes() == before


def test_a_migration_that_fails_half_way_leaves_the_file_unchanged(tmp_path, monkeypatch):
    """An old database whose upgrade breaks after the first migration step ran: the whole upgrade is one
    transaction, so the file stays at its old revision with every row, and says so."""
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0002_speedup_basis")
        connection.exec_driver_sql("INSERT INTO conversations VALUES (1, 'Old chat', NULL, '2024-01-01 10:00:00', "
                                   "'2024-01-01 10:05:00')")
    engine.dispose()
    from alembic.operations import Operations

    real_batch = Operations.batch_alter_table
    calls = []

    def failing_second_step(self, table, *args, **kwargs):
        calls.append(table)
        if table == "conversations":  # 0004's step, after 0003's tables were created
            raise sqlite3.OperationalError("simulated failure in the middle of the upgrade")
        return real_batch(self, table, *args, **kwargs)

    monkeypatch.setattr(Operations, "batch_alter_table", failing_second_step)
    with pytest.raises(DatabaseUnusable, match="could not be upgraded.*left unchanged"):
        open_database(path)
    assert calls  # the failure came from inside the upgrade
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0002_speedup_basis"
        assert raw.execute("SELECT title FROM conversations").fetchall() == [("Old chat",)]
        assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'comparisons'").fetchall() == []
    monkeypatch.setattr(Operations, "batch_alter_table", real_batch)
    store = Store(open_database(path))  # fixed specchat: the same file upgrades
    assert [c.title for c in store.list_conversations()] == ["Old chat"]
    store.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone()[0] == HEAD_REVISION


def test_locked_and_damaged_are_told_apart(tmp_path):
    assert issubclass(DatabaseLocked, StorageError) and issubclass(DatabaseDamaged, StorageError)
    path = tmp_path / "specchat.db"
    a_chat(path)
    other = hold_exclusive_lock(path)
    try:
        with pytest.raises(DatabaseLocked):
            open_database(path, busy_timeout_ms=50)
    finally:
        other.execute("ROLLBACK")
        other.close()
