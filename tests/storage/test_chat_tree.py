"""A chat as a tree (0007): siblings instead of deletions, the branch on screen, flips, forks, deletes, the export's
tree, and the migration that makes every older chat one branch."""

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine

from specchat.chats.conversations import Conversations
from specchat.core.errors import StorageError
from specchat.storage import Store, open_database
from specchat.storage.backups import backups_of
from specchat.storage.db import HEAD_REVISION, alembic_config

from test_documents import HANDBOOK


def texts(store, chat_id) -> list[str]:
    return [m.text for m in store.messages(chat_id)]


@pytest.fixture
def branched(store):
    """A chat whose reply was regenerated once and whose question was then edited:
    q1 → (a1, a1b) and, beside q1, q2 → a2 (on screen)."""
    chat = store.create_conversation("Tree")
    q1 = store.add_message(chat.id, "user", "q1")
    a1 = store.add_message(chat.id, "assistant", "a1")
    store.tree.end_at(chat.id, q1.id)
    a1b = store.add_message(chat.id, "assistant", "a1b")
    q2 = store.add_message(chat.id, "user", "q2", sibling_of=q1.id)
    a2 = store.add_message(chat.id, "assistant", "a2")
    return chat, q1, a1, a1b, q2, a2


def test_siblings_keep_everything_and_the_screen_shows_one_branch(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    assert a1b.siblings == (a1.id, a1b.id) and a1b.parent_id == q1.id and a1b.position == 1
    assert q2.siblings == (q1.id, q2.id) and q2.parent_id is None and q2.position == 0
    shown = store.messages(chat.id)
    assert [m.text for m in shown] == ["q2", "a2"] and shown[0].siblings == (q1.id, q2.id)
    assert store.conversation(chat.id).message_count == 5  # nothing was deleted
    store.tree.show_branch(chat.id, q1.id)  # ‹: the newest branch under q1 is its regenerated reply
    assert texts(store, chat.id) == ["q1", "a1b"]
    store.tree.show_branch(chat.id, a1.id)
    assert texts(store, chat.id) == ["q1", "a1"]
    store.add_message(chat.id, "user", "follow-up")  # the next message continues the branch on screen
    assert texts(store, chat.id) == ["q1", "a1", "follow-up"]
    with pytest.raises(StorageError, match="not in conversation"):
        store.tree.show_branch(store.create_conversation("Other").id, a1.id)


def test_flip_steps_through_siblings_and_stops_at_the_ends(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    conversations = Conversations(store)
    opened = conversations.flip(conversations.open(chat.id), q2.id, -1)
    assert [m.text for m in opened.messages] == ["q1", "a1b"]
    opened = conversations.flip(opened, a1b.id, -1)
    assert [m.text for m in opened.messages] == ["q1", "a1"]
    assert [m.text for m in conversations.flip(opened, a1.id, -1).messages] == ["q1", "a1"]  # the first stays
    opened = conversations.flip(opened, q1.id, +1)
    assert [m.text for m in opened.messages] == ["q2", "a2"]


def test_delete_takes_what_followed_and_moves_the_screen(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    assert store.tree.delete(chat.id, q2.id) == 2
    assert texts(store, chat.id) == ["q1", "a1b"]  # the newest branch left
    assert store.tree.delete(chat.id, q1.id) == 3
    assert texts(store, chat.id) == [] and store.conversation(chat.id).message_count == 0


def test_runs_stay_with_their_branch(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    for message in (a1, a1b, a2):
        store.record_run({"message_id": message.id, "conversation_id": chat.id, "target": "t", "drafter": "pld",
                          "k": 4, "adaptive": True, "temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 1,
                          "device": "cpu", "new_tokens": len(message.text)})
    _, messages, runs = store.chat(chat.id)
    assert set(runs) == {a2.id} and runs[a2.id].temperature == 0.7
    store.tree.show_branch(chat.id, a1.id)
    assert set(store.chat(chat.id)[2]) == {a1.id}
    assert store.conversation_stats(chat.id).runs == 3  # the statistics keep every branch's runs


def test_fork_copies_the_path_with_its_documents(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    store.set_system_prompt(chat.id, "Be brief.")
    store.documents.attach(q1.id, HANDBOOK, tokens=120)
    store.update_message(a1b.id, spans=[(0, 3, "draft")], stopped=True)
    forked = Conversations(store).fork(chat.id, a1b.id)
    assert forked.id != chat.id and forked.title == "Branch: Tree" and forked.system_prompt == "Be brief."
    copied = store.messages(forked.id)
    assert [(m.role, m.text, m.parent_id) for m in copied] == [("user", "q1", None), ("assistant", "a1b",
                                                                                       copied[0].id)]
    assert copied[1].spans == ((0, 3, "draft"),) and copied[1].stopped
    [(info, document)] = store.documents.for_export(forked.id)[copied[0].id]
    assert document == HANDBOOK and info.tokens == 120
    assert texts(store, chat.id) == ["q2", "a2"]  # the original is untouched
    assert store.documents.search(forked.id, "backups")  # the copy's passages are indexed


def test_export_carries_the_tree_and_imports_back(store, branched):
    chat, *_ = branched
    store.tree.show_branch(chat.id, branched[2].id)  # a1 on screen
    exported = store.export_json(chat.id)
    assert [(m["text"], m["parent"]) for m in exported["messages"]] == [
        ("q1", None), ("a1", 0), ("a1b", 0), ("q2", None), ("a2", 3)]
    assert exported["shown"] == 1
    imported = store.import_json(json.dumps(exported))
    assert texts(store, imported.id) == ["q1", "a1"] and imported.message_count == 5
    hits = store.chat_list.search("a1b")  # the import's rows are in the full-text index too
    assert {hit.conversation_id for hit in hits if hit.message_id is not None} == {chat.id, imported.id}
    assert store.export_json(imported.id)["messages"] == exported["messages"]
    store.tree.show_branch(imported.id, store.messages(imported.id)[0].siblings[1])
    assert texts(store, imported.id) == ["q2", "a2"]


def test_message_search_index_follows_every_write(store, branched):
    chat, q1, *_ = branched
    store.update_message(q1.id, text="Where do penguins live?")
    with sqlite3.connect(store.database.path) as raw:
        found = raw.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'penguin'").fetchall()
        assert found == [(q1.id,)]
        store.tree.delete(chat.id, q1.id)
        assert raw.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'penguin'").fetchall() == []


def database_at_0006(path):
    """A database as the specchat before branches (revision 0006) leaves it: two chats of one list each."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0006_documents")
    engine.dispose()
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO conversations VALUES (1, 'First', NULL, '2025-01-01 10:00:00', "
                    "'2025-01-01 10:05:00', 1)")
        raw.execute("INSERT INTO conversations VALUES (2, 'Second', NULL, '2025-01-02 10:00:00', "
                    "'2025-01-02 10:05:00', 1)")
        rows = [(1, 1, 0, "user", "Tell me about otters"), (2, 1, 1, "assistant", "Otters are mustelids."),
                (3, 2, 0, "user", "hi"), (4, 1, 2, "user", "More, please"), (5, 2, 1, "assistant", "hello"),
                (6, 1, 3, "assistant", "They hold hands while sleeping.")]
        raw.executemany("INSERT INTO messages (id, conversation_id, position, role, text, created_at, stopped) "
                        "VALUES (?, ?, ?, ?, ?, '2025-01-01 10:00:00', 0)", rows)


def test_the_migration_makes_every_old_chat_one_branch(tmp_path):
    path = tmp_path / "specchat.db"
    database_at_0006(path)
    open_database(path).close()
    [backup] = backups_of(path)
    assert backup.name.startswith("specchat-0006_documents-")
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchone()[0] == HEAD_REVISION
        assert raw.execute("SELECT id, parent_id FROM messages ORDER BY id").fetchall() == [
            (1, None), (2, 1), (3, None), (4, 2), (5, 3), (6, 4)]
        assert raw.execute("SELECT id, leaf_id, pinned, folder_id FROM conversations ORDER BY id").fetchall() == [
            (1, 6, 0, None), (2, 5, 0, None)]
        assert raw.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'otter'").fetchall() == [(1,), (2,)]


def test_a_branch_reads_the_replies_beside_it(store, branched):
    chat, q1, a1, a1b, q2, a2 = branched
    # regenerated: the reply it stands beside, and the reply to the question's other version
    assert store.tree.sibling_replies(chat.id, a1b.id) == ["a1", "a2"]
    assert store.tree.sibling_replies(chat.id, a2.id) == ["a1", "a1b"]  # after an edit: the old question's replies
    store.tree.end_at(chat.id, q2.id)
    again = store.add_message(chat.id, "assistant", "")
    # regenerated after an edit: every earlier version, the nearest (a2) newest, which the lookup prefers on a tie
    assert store.tree.sibling_replies(chat.id, again.id) == ["a1", "a1b", "a2"]


OLD_FILE = Path(__file__).parent / "data" / "specchat-0006.db.gz"  # made by main before branches: data/make_*.py


def every_old_row(path) -> dict:
    """Every row of every table of revision 0006 (the columns it had), in rowid order, by table."""
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT "
                                                 "LIKE 'sqlite_%' AND name NOT LIKE '%_fts%' ORDER BY name")]
        return {table: ([c[1] for c in conn.execute(f"PRAGMA table_info({table})")],
                        conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()) for table in tables}


def test_a_database_made_by_the_previous_specchat_upgrades_with_every_row(tmp_path):
    path = tmp_path / "specchat.db"
    path.write_bytes(gzip.decompress(OLD_FILE.read_bytes()))
    before = every_old_row(path)
    assert before["alembic_version"][1] == [("0006_documents",)] and len(before["messages"][1]) == 5
    store = Store(open_database(path))
    try:
        after = every_old_row(path)
        for table, (columns, rows) in before.items():
            if table == "alembic_version":
                continue
            kept = [after[table][0].index(column) for column in columns]
            assert [tuple(row[i] for i in kept) for row in after[table][1]] == rows, table
        otters = store.list_conversations("otters")[0]
        shown = store.messages(otters.id)
        assert [m.parent_id for m in shown] == [None] + [m.id for m in shown[:-1]]
        assert store.documents.of_chat(otters.id)[0].name == "otters.md"
        runs = store.chat(otters.id)[2]
        assert runs and not any(run.awaiting_costs for run in runs.values())  # 0008: NULL reads as not held back
        assert len(backups_of(path)) == 1
    finally:
        store.close()
