"""Store: conversations, messages, runs and statistics, calibrations. Everything comes back as frozen records."""

import dataclasses
import sqlite3

import pytest
from storage_helpers import make_run

from specchat.storage import ConversationInfo, MessageInfo, StorageError, Store, open_database


def test_create_rename_and_system_prompt(store):
    chat = store.create_conversation()
    assert isinstance(chat, ConversationInfo) and chat.title == "New chat" and chat.system_prompt is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        chat.title = "x"
    assert store.rename_conversation(chat.id, "  Grammar   help ").title == "Grammar help"
    assert store.set_system_prompt(chat.id, "Be brief.").system_prompt == "Be brief."
    assert store.set_system_prompt(chat.id, "  ").system_prompt is None
    with pytest.raises(StorageError, match="empty"):
        store.rename_conversation(chat.id, " ")
    with pytest.raises(StorageError, match="does not exist"):
        store.rename_conversation(999, "x")


def test_list_is_newest_updated_first(store):
    first, second = store.create_conversation("first"), store.create_conversation("second")
    assert [c.title for c in store.list_conversations()] == ["second", "first"]
    store.add_message(first.id, "user", "bump")
    assert [c.title for c in store.list_conversations()] == ["first", "second"]
    store.rename_conversation(second.id, "renamed")  # renaming does not reorder
    assert [(c.title, c.message_count) for c in store.list_conversations()] == [("first", 1), ("renamed", 0)]


def test_search_titles_and_message_text_in_any_case(store):
    recipes = store.create_conversation("Pancake RECIPES")
    trip = store.create_conversation("Trip")
    store.add_message(trip.id, "user", "Where is the Café de Flore?")
    store.add_message(trip.id, "assistant", "It is in Paris, 100% sure.")
    store.create_conversation("Other")

    def titles(query):
        return sorted(c.title for c in store.list_conversations(query))

    assert titles("recipes") == ["Pancake RECIPES"]
    assert titles("CAFÉ DE") == ["Trip"]  # non-ASCII case folding too
    assert titles("paris") == ["Trip"]
    assert titles("100%") == ["Trip"] and titles("1_0") == []  # LIKE wildcards are literal
    assert titles("nothing like this") == []
    assert len(store.list_conversations("  ")) == 3
    assert [c.message_count for c in store.list_conversations("paris")] == [2]
    assert recipes.id != trip.id


def test_messages_positions_and_delete_from(store):
    chat = store.create_conversation()
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        message = store.add_message(chat.id, role, f"m{i}")
        assert isinstance(message, MessageInfo) and message.position == i
    assert store.delete_messages_from(chat.id, 2) == 2
    assert [m.text for m in store.messages(chat.id)] == ["m0", "m1"]
    assert store.add_message(chat.id, "user", "again").position == 2
    with pytest.raises(StorageError, match="role"):
        store.add_message(chat.id, "robot", "x")
    with pytest.raises(StorageError, match="does not exist"):
        store.add_message(999, "user", "x")


def test_partial_reply_is_saved_while_streaming(db_path):
    store = Store(open_database(db_path))
    chat = store.create_conversation()
    store.add_message(chat.id, "user", "Tell me a story")
    reply = store.add_message(chat.id, "assistant", "")
    store.update_message(reply.id, text="Once", spans=[[0, 4, "target"]])
    store.update_message(reply.id, text="Once upon", spans=[[0, 4, "target"], [4, 9, "draft"]])
    # the app is killed here: nothing else is written
    store.close()

    store = Store(open_database(db_path))
    saved = store.messages(chat.id)[1]
    assert (saved.id, saved.text, saved.spans) == (reply.id, "Once upon", ((0, 4, "target"), (4, 9, "draft")))
    final = store.update_message(reply.id, stopped=True, finish_reason="cancelled")
    assert (final.text, final.stopped, final.finish_reason) == ("Once upon", True, "cancelled")
    with pytest.raises(StorageError, match="outside the text"):
        store.update_message(reply.id, spans=[[0, 99, "draft"]])
    with pytest.raises(StorageError, match="origin"):
        store.update_message(reply.id, spans=[[0, 1, "oracle"]])
    with pytest.raises(StorageError, match="does not exist"):
        store.update_message(12345, text="x")
    store.close()


def test_delete_conversation_cascades_and_keeps_runs(store, db_path):
    chat = store.create_conversation()
    keep = store.create_conversation("keep")
    reply = store.add_message(chat.id, "assistant", "hello")
    store.add_message(keep.id, "user", "mine")
    run_id = store.record_run(make_run(conversation_id=chat.id, message_id=reply.id))
    assert store.delete_conversation(chat.id) is True
    assert store.delete_conversation(chat.id) is False
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (chat.id,)).fetchone() == (0,)
        assert conn.execute("SELECT message_id, conversation_id FROM generation_runs WHERE id = ?",
                            (run_id,)).fetchone() == (None, None)
    assert [c.title for c in store.list_conversations()] == ["keep"]
    assert [m.text for m in store.messages(keep.id)] == ["mine"]
    assert store.overall_stats().runs == 1
    with pytest.raises(StorageError, match="does not exist"):
        store.messages(chat.id)


def test_record_run_validation(store):
    run_id = store.record_run(make_run(alpha=0.5, tau=2.0, mean_k=3.0, id=777, something_else="x"))
    assert run_id != 777
    with pytest.raises(StorageError, match="needs .*target"):
        store.record_run({k: v for k, v in make_run().items() if k != "target"})
    with pytest.raises(StorageError, match="speedup_basis"):
        store.record_run(make_run(speedup_basis="guessed"))
    with pytest.raises(StorageError, match="does not exist"):
        store.record_run(make_run(app_session_id=4242))


def test_aggregates_on_seeded_runs(store):
    empty = store.overall_stats()
    assert (empty.runs, empty.new_tokens, empty.mean_alpha, empty.tau, empty.tokens_per_s, empty.mean_speedup) == \
        (0, 0, 0.0, 0.0, 0.0, None)
    session = store.start_app_session("0.1.0")
    chat, other = store.create_conversation(), store.create_conversation()
    store.record_run(make_run(conversation_id=chat.id, app_session_id=session, new_tokens=30, target_passes=10,
                              draft_proposed=40, draft_accepted=20, wall_s=3.0, speedup=2.0))
    store.record_run(make_run(conversation_id=chat.id, app_session_id=session, new_tokens=10, target_passes=10,
                              draft_proposed=0, draft_accepted=0, wall_s=1.0, speedup=None))
    store.record_run(make_run(conversation_id=other.id, new_tokens=60, target_passes=20, draft_proposed=60,
                              draft_accepted=40, wall_s=2.0, speedup=3.0))

    stats = store.conversation_stats(chat.id)
    assert (stats.runs, stats.new_tokens, stats.draft_proposed, stats.draft_accepted) == (2, 40, 40, 20)
    assert stats.mean_alpha == pytest.approx(0.5)
    assert stats.tau == pytest.approx(40 / 20)
    assert stats.tokens_per_s == pytest.approx(40 / 4.0)
    assert stats.mean_speedup == pytest.approx(2.0)  # the run without a speedup does not count

    assert store.app_session_stats(session) == stats
    overall = store.overall_stats()
    assert (overall.runs, overall.new_tokens) == (3, 100)
    assert overall.mean_alpha == pytest.approx(60 / 100)
    assert overall.tau == pytest.approx(100 / 40)
    assert overall.tokens_per_s == pytest.approx(100 / 6.0)
    assert overall.mean_speedup == pytest.approx(2.5)
    assert store.conversation_stats(999).runs == 0


def test_app_sessions(store, db_path):
    session = store.start_app_session("0.1.0")
    store.end_app_session(session)
    with sqlite3.connect(db_path) as conn:
        version, ended = conn.execute("SELECT app_version, ended_at FROM app_sessions").fetchone()
    assert version == "0.1.0" and ended is not None
    with pytest.raises(StorageError):
        store.end_app_session(session + 1)


def test_calibrations_latest_wins(store):
    assert store.latest_calibration("embedded", "cpu", "float32") is None
    store.save_calibration("embedded", "cpu", "float32", 18.0)
    store.save_calibration("embedded", "cpu", "float32", 21.5)
    store.save_calibration("embedded", "cuda", "bfloat16", 300.0)
    assert store.latest_calibration("embedded", "cpu", "float32") == 21.5
    assert store.latest_calibration("embedded", "cuda", "bfloat16") == 300.0
    assert store.latest_calibration("embedded", "cuda", "float16") is None
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(StorageError, match="tokens/s"):
            store.save_calibration("embedded", "cpu", "float32", bad)
