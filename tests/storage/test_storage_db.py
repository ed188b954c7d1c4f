"""Opening the database: migrations (fresh and from an old schema), permissions, pragmas, damaged/locked files."""

import json
import os
import sqlite3
import sys

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from specchat.core.errors import DatabaseUnusable, StorageError
from specchat.storage import Store, default_database_path, open_database
from specchat.storage.db import HEAD_REVISION, alembic_config
from specchat.storage.tables import Base, in_orm_schema

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")


def revision_of(path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def columns_of(path, table) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def test_default_path_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path))
    assert default_database_path() == tmp_path / "specchat.db"
    monkeypatch.delenv("SPECCHAT_DATA_DIR")
    assert default_database_path().name == "specchat.db"


def test_empty_file_is_migrated_to_head(tmp_path):
    path = tmp_path / "specchat.db"
    path.touch()
    open_database(path).close()
    assert revision_of(path) == HEAD_REVISION
    tables = set(inspect(create_engine(f"sqlite:///{path}")).get_table_names())
    assert {"conversations", "messages", "app_sessions", "generation_runs", "calibrations"} <= tables


def test_head_constant_and_models_match_the_migrations(store):
    config = alembic_config(None)
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION
    with store.database.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True,
                                                         "include_name": in_orm_schema})
        assert compare_metadata(context, Base.metadata) == []
        tables = set(inspect(conn).get_table_names())
        assert {"documents", "document_passages", "document_passages_fts", "document_passages_fts_data"} <= tables


def test_old_schema_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001_initial")
        conn.exec_driver_sql("INSERT INTO conversations VALUES (1, 'Old chat', 'Be brief.', "
                             "'2024-01-01 10:00:00', '2024-01-01 10:05:00')")
        conn.exec_driver_sql("INSERT INTO messages VALUES (1, 1, 0, 'user', 'hi', '2024-01-01 10:00:00', 0, NULL)")
        conn.exec_driver_sql("INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'hello', '2024-01-01 10:00:01', "
                             "1, '[[0, 5, \"draft\"]]')")
        conn.exec_driver_sql("INSERT INTO app_sessions VALUES (1, '2024-01-01 09:59:00', NULL, '0.0.1')")
        conn.exec_driver_sql(
            "INSERT INTO generation_runs (id, message_id, conversation_id, app_session_id, created_at, target, "
            "drafter, k, adaptive, temperature, top_p, top_k, seed, device, new_tokens, target_passes, "
            "draft_proposed, draft_accepted, wall_s, speedup) VALUES (1, 2, 1, 1, '2024-01-01 10:00:01', "
            "'embedded', 'pld', 4, 1, 0.0, 1.0, 0, 0, 'cpu', 12, 4, 8, 6, 1.5, 1.8)")
    engine.dispose()
    assert "finish_reason" not in columns_of(path, "generation_runs")

    store = Store(open_database(path))
    try:
        assert revision_of(path) == HEAD_REVISION
        assert {"finish_reason", "speedup_basis", "baseline_tokens_per_s", "predicted_speedup"} <= \
            columns_of(path, "generation_runs")
        assert "finish_reason" in columns_of(path, "messages")
        assert columns_of(path, "calibrations") >= {"target", "device", "dtype", "tokens_per_s", "measured_at"}
        [chat] = store.list_conversations()
        assert (chat.title, chat.system_prompt, chat.message_count) == ("Old chat", "Be brief.", 2)
        reply = store.messages(1)[1]
        assert (reply.text, reply.stopped, reply.spans, reply.finish_reason) == ("hello", True, ((0, 5, "draft"),),
                                                                                 None)
        stats = store.overall_stats()
        assert (stats.runs, stats.new_tokens, stats.mean_alpha, stats.tau) == (1, 12, 0.75, 3.0)
        store.record_run({"target": "embedded", "drafter": "pld", "k": 4, "adaptive": True, "temperature": 0.0,
                          "top_p": 1.0, "top_k": 0, "seed": 0, "device": "cpu", "speedup_basis": "calibrated"})
        store.save_calibration("embedded", "cpu", "float32", 20.0)
        assert store.latest_calibration("embedded", "cpu", "float32") == 20.0
    finally:
        store.close()


def test_reopening_keeps_the_data(db_path):
    with open_database(db_path) as db:
        Store(db).add_message(Store(db).create_conversation("Keep me").id, "user", "still here")
    with open_database(db_path) as db:
        [chat] = Store(db).list_conversations()
        assert Store(db).messages(chat.id)[0].text == "still here"


@posix_only
def test_file_and_folder_are_private(db_path):
    open_database(db_path).close()
    assert db_path.stat().st_mode & 0o777 == 0o600
    assert db_path.parent.stat().st_mode & 0o777 == 0o700


@posix_only
def test_existing_file_permissions_are_tightened(tmp_path):
    path = tmp_path / "loose.db"
    path.touch()
    os.chmod(path, 0o644)
    open_database(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_pragmas_on_every_connection(store):
    with store.database.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


def test_damaged_file_raises_storage_error(tmp_path):
    path = tmp_path / "specchat.db"
    path.write_bytes(b"\x13\x37 this is not SQLite " * 300)
    with pytest.raises(StorageError, match="damaged") as info:
        open_database(path)
    assert str(path) in str(info.value) and "move it away" in str(info.value)
    assert path.read_bytes().startswith(b"\x13\x37")  # left as it was


def test_locked_database_raises_storage_error(tmp_path):
    path = tmp_path / "specchat.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")  # another process holding the write lock of a rollback-journal database
    try:
        with pytest.raises(StorageError, match="in use by another program"):
            open_database(path, busy_timeout_ms=50)
    finally:
        other.execute("ROLLBACK")
        other.close()
    open_database(path).close()


def test_database_from_a_newer_specchat_is_refused(db_path):
    open_database(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(StorageError, match="newer specchat"):
        open_database(db_path)
    assert revision_of(db_path) == "9999_future"


def test_0003_repairs_acceptance_by_position_written_character_by_character(tmp_path):
    """0.x stored json.dumps(list(json.dumps(ratios))): the list of the characters of the JSON text."""
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    broken = json.dumps(list(json.dumps([0.5, 0.25])))
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0002_speedup_basis")
        for row_id, value in ((1, broken), (2, "[0.75]"), (3, "not json")):
            conn.exec_driver_sql(
                "INSERT INTO generation_runs (id, created_at, target, drafter, k, adaptive, temperature, top_p, "
                "top_k, seed, device, acceptance_by_position) VALUES "
                f"({row_id}, '2024-01-01 10:00:01', 'embedded', 'pld', 4, 1, 0.0, 1.0, 0, 0, 'cpu', ?)", (value,))
    engine.dispose()
    store = Store(open_database(path))
    try:
        with store.database.engine.connect() as conn:
            values = conn.exec_driver_sql("SELECT acceptance_by_position FROM generation_runs ORDER BY id").scalars()
            assert [json.loads(v) for v in values] == [[0.5, 0.25], [0.75], []]
        assert [r.source for r in store.runs()] == ["chat"] * 3  # old runs were all chat replies
    finally:
        store.close()


@posix_only
def test_an_existing_default_data_folder_is_tightened(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(folder))
    from specchat.storage.db import default_database_path

    open_database(default_database_path()).close()
    assert folder.stat().st_mode & 0o777 == 0o700
    mine = tmp_path / "mine"  # a folder of the user's own, where they chose to keep a database: left as it is
    mine.mkdir()
    os.chmod(mine, 0o755)
    open_database(mine / "chats.db").close()
    assert mine.stat().st_mode & 0o777 == 0o755


def test_a_database_with_tables_but_no_recorded_version_is_refused_unchanged(tmp_path):
    import sqlite3

    from specchat.core.errors import StorageError

    path = tmp_path / "odd.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT)")
    raw.execute("INSERT INTO conversations (title) VALUES ('kept')")
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match="could not be upgraded .*left unchanged"):
        open_database(path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT title FROM conversations").fetchall() == [("kept",)]
    assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'").fetchall() == []
    raw.close()
    assert len(path.read_bytes()) == len(before)


# --- the backup before a migration ----------------------------------------------------------------------------------

OLD_REVISION = "0005_exactness"


def database_at_0005(path, title="Old chat"):
    """A database left by the specchat before documents (revision 0005), with a row in every table, its last rows
    still in the WAL (not yet in the main file) as a running specchat leaves them."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), OLD_REVISION)
    engine.dispose()
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA wal_autocheckpoint=0")
    statements = [
        f"INSERT INTO conversations VALUES (1, '{title}', 'Be brief.', '2025-01-01 10:00:00', "
        "'2025-01-01 10:05:00', 1)",
        "INSERT INTO messages VALUES (1, 1, 0, 'user', 'hi', '2025-01-01 10:00:00', 0, NULL, NULL)",
        "INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'hello', '2025-01-01 10:00:01', 1, "
        "'[[0, 5, \"draft\"]]', 'eos')",
        "INSERT INTO app_sessions VALUES (1, '2025-01-01 09:59:00', NULL, '0.9')",
        "INSERT INTO comparisons (id, created_at, prompt, target, greedy) VALUES (1, '2025-01-01 11:00:00', 'p', "
        "'t', 1)",
        "INSERT INTO comparison_tracks (id, comparison_id, position, drafter, text) VALUES (1, 1, 0, 'pld', 'x')",
        "INSERT INTO generation_runs (id, message_id, conversation_id, app_session_id, created_at, target, drafter, k, "
        "adaptive, temperature, top_p, top_k, seed, device, new_tokens, exactness) VALUES (1, 2, 1, 1, "
        "'2025-01-01 10:00:01', 'embedded', 'pld', 4, 1, 0.0, 1.0, 0, 0, 'cpu', 12, 'bit-identical')",
        "INSERT INTO calibrations VALUES (1, 'embedded', 'cpu', 'float32', 20.5, '2025-01-01 09:00:00')",
    ]
    for statement in statements:
        raw.execute(statement)
    return raw  # open: closing the last connection would checkpoint the WAL into the file


OLD_TABLES = ("conversations", "messages", "app_sessions", "generation_runs", "comparisons", "comparison_tracks",
              "calibrations")


def every_row(path, like: dict | None = None) -> dict:
    """Every row of every table that revision 0005 had, by table, with its column names, in rowid order; of the
    columns `like` (an earlier every_row) had, so that columns added since (0006's sources) are left out."""
    with sqlite3.connect(path) as conn:
        rows = {}
        for table in OLD_TABLES:
            columns = like[table][0] if like else [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            rows[table] = (columns, conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall())
        return rows


def test_an_old_database_is_backed_up_before_its_upgrade(tmp_path, caplog):
    from specchat.storage.backups import backups_of

    path = tmp_path / "specchat.db"
    writer = database_at_0005(path)
    assert path.with_name("specchat.db-wal").stat().st_size > 0  # rows a plain file copy would miss
    before = every_row(path)
    with caplog.at_level("INFO", logger="specchat.storage.backups"):
        open_database(path).close()
    writer.close()
    [backup] = backups_of(path)
    assert backup.parent == tmp_path / "backups" and backup.name.startswith(f"specchat-{OLD_REVISION}-")
    assert str(backup) in caplog.text
    assert revision_of(backup) == OLD_REVISION and every_row(backup) == before
    assert revision_of(path) == HEAD_REVISION and every_row(path, before) == before  # the upgrade kept every row
    if sys.platform != "win32":
        assert backup.stat().st_mode & 0o777 == 0o600 and backup.parent.stat().st_mode & 0o777 == 0o700
    open_database(path).close()  # at the head now: no second backup
    assert backups_of(path) == [backup]


def test_no_backup_of_a_new_database(tmp_path):
    open_database(tmp_path / "specchat.db").close()
    open_database(tmp_path / "specchat.db").close()
    assert not (tmp_path / "backups").exists()


def test_the_newest_three_backups_are_kept(tmp_path):
    from specchat.storage.backups import backups_of

    path = tmp_path / "specchat.db"
    for number in range(5):
        for leftover in tmp_path.glob("specchat.db*"):
            leftover.unlink()
        database_at_0005(path, title=f"Chat {number}").close()
        open_database(path).close()
    kept = backups_of(path)
    assert len(kept) == 3
    assert [every_row(b)["conversations"][1][0][1] for b in kept] == ["Chat 2", "Chat 3", "Chat 4"]


def test_an_upgrade_without_a_backup_is_refused(tmp_path):
    path = tmp_path / "specchat.db"
    database_at_0005(path).close()
    before = every_row(path)
    (tmp_path / "backups").write_text("a file where the backups folder should be")
    with pytest.raises(DatabaseUnusable, match="no backup of it could be made in .*left unchanged") as raised:
        open_database(path)
    assert "\n" not in str(raised.value)
    assert revision_of(path) == OLD_REVISION and every_row(path) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    (tmp_path / "backups").unlink()  # the folder can be made now: the same file upgrades
    open_database(path).close()
    assert revision_of(path) == HEAD_REVISION and every_row(path, before) == before
