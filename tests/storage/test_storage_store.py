"""Store: conversations, messages, runs and statistics, calibrations. Everything comes back as frozen records."""

import dataclasses
import sqlite3

import pytest
from storage_helpers import make_run

from specchat.chats.run_book import REPLY_SOURCES, RunBook
from specchat.core.errors import StorageError
from specchat.storage import ConversationInfo, MessageInfo, Store, open_database


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
    added = []
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        added.append(store.add_message(chat.id, role, f"m{i}"))
        assert isinstance(added[-1], MessageInfo) and added[-1].position == i
        assert added[-1].parent_id == (added[-2].id if i else None) and added[-1].siblings == (added[-1].id,)
    assert store.tree.delete(chat.id, added[2].id) == 2  # the message and what followed it
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
    # a field that is not a run's (derived figures, the row id, a misspelling) is refused, not silently dropped
    for extra in ({"alpha": 0.5}, {"id": 777}, {"spedup": 1.5}):
        with pytest.raises(StorageError, match="no field " + next(iter(extra))):
            store.record_run(make_run(**extra))
    with pytest.raises(StorageError, match="no field tau"):
        store.update_run(store.record_run(make_run()), {"tau": 2.0})
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


def test_the_status_bar_counts_the_sessions_replies_not_its_race_lanes(store):
    session = store.start_app_session("0.1.0")
    chat = store.create_conversation()
    store.record_run(make_run(conversation_id=chat.id, app_session_id=session, new_tokens=30, target_passes=10,
                              draft_proposed=40, draft_accepted=20, wall_s=3.0, speedup=2.0))
    for drafter, speedup in (("none", None), ("pld", 0.97)):  # a race's two lanes, in the same app session
        store.record_run(make_run(source="race", drafter=drafter, app_session_id=session, new_tokens=23,
                                  target_passes=19, draft_proposed=20, draft_accepted=16, wall_s=0.25,
                                  speedup=speedup))
    assert store.app_session_stats(session).runs == 3  # the dashboard's: everything the session ran
    replies = store.app_session_stats(session, REPLY_SOURCES)
    assert (replies.runs, replies.new_tokens, replies.mean_speedup) == (1, 30, pytest.approx(2.0))
    assert RunBook(store, session).status_text(None) == \
        "Session: 1 reply · 10.0 tok/s · accepted 50% · τ 3.00 · 2.00× vs plain"


def test_a_reply_without_a_ratio_for_a_busy_machine_says_why_when_reopened(store):
    from specchat.chats.run_book import footer_text

    chat = store.create_conversation()
    message = store.add_message(chat.id, "assistant", "hi")
    store.record_run(make_run(conversation_id=chat.id, message_id=message.id, new_tokens=30, target_passes=10,
                              draft_proposed=40, draft_accepted=20, wall_s=3.0, speedup=None,
                              speedup_basis="other programs busy"))
    run = store.run_for_message(message.id)
    assert run.speedup is None and "no ratio: other programs were busy" in footer_text(run)
    assert store.conversation_stats(chat.id).mean_speedup is None


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


# --- dashboard queries and comparisons ------------------------------------------------------------------------

def _seed_runs(store):
    from datetime import datetime, timezone

    session = store.start_app_session("test")
    chat = store.create_conversation("Fox chat")
    made = []
    for drafter, accepted, speedup in (("none", 0, None), ("pld", 6, 1.2), ("model", 8, 1.5), ("model", 2, 0.9)):
        made.append(store.record_run(make_run(
            drafter=drafter, app_session_id=session, conversation_id=chat.id, draft="draft" if drafter == "model"
            else None, draft_proposed=10 if drafter != "none" else 0, draft_accepted=accepted, speedup=speedup,
            proposed_by_position=[5, 5] if drafter != "none" else [], accepted_by_position=[accepted // 2 + 1,
                                                                                            accepted // 2 - 1]
            if drafter != "none" else [])))
    store.record_run(make_run(drafter="pld", source="bench", category="coding", speedup=2.0,
                              created_at=datetime(2020, 5, 1, tzinfo=timezone.utc)))
    return session, chat


def test_runs_are_filtered_and_carry_what_the_dashboard_needs(store):
    from datetime import datetime, timezone

    from specchat.storage.records import RunFilter

    session, chat = _seed_runs(store)
    runs = store.runs()
    assert len(runs) == 5 and runs[0].source == "bench"  # oldest first
    assert [r.drafter for r in store.runs(RunFilter(drafter="model"))] == ["model", "model"]
    assert len(store.runs(RunFilter(source="chat"))) == 4
    assert len(store.runs(RunFilter(since=datetime(2021, 1, 1, tzinfo=timezone.utc)))) == 4
    assert len(store.runs(RunFilter(until=datetime(2021, 1, 1, tzinfo=timezone.utc)))) == 1
    assert {r.draft for r in store.runs(RunFilter(draft=""))} == {None}
    model = store.runs(RunFilter(drafter="model"))[0]
    assert (model.pair, model.alpha, model.conversation_title) == ("embedded + draft", 0.8, "Fox chat")
    assert model.proposed_by_position == (5, 5) and model.accepted_by_position == (5, 3)
    choices = store.run_choices()
    assert choices["drafters"] == ["model", "none", "pld"] and choices["sources"] == ["bench", "chat"]
    assert ("embedded", "draft") in choices["pairs"]


def test_run_groups_sum_per_session_pair_conversation_and_category(store):
    session, chat = _seed_runs(store)
    by_pair = {g.label: g for g in store.run_groups("pair")}
    model = by_pair["embedded + draft · model"]
    assert model.aggregate.runs == 2 and model.aggregate.mean_alpha == 0.5
    assert model.aggregate.mean_speedup == pytest.approx(1.2)
    assert model.proposed_by_position == (10, 10) and model.acceptance_by_position == (0.7, 0.3)
    [by_session] = store.run_groups("app_session")
    assert by_session.aggregate.runs == 4  # the benchmark run belongs to no app session
    [by_chat] = store.run_groups("conversation")
    assert by_chat.label == "Fox chat"
    [by_category] = store.run_groups("category")
    assert by_category.label == "coding · pld"
    with pytest.raises(StorageError, match="grouped by"):
        store.run_groups("colour")


def test_a_run_with_an_unknown_source_or_broken_counts_is_refused(store):
    with pytest.raises(StorageError, match="source"):
        store.record_run(make_run(source="dream"))
    with pytest.raises(StorageError, match="list of numbers"):
        store.record_run(make_run(acceptance_by_position="[0.5]"))


def test_a_comparison_saves_its_tracks_and_runs_together_and_reopens(store):
    track = {"drafter": "none", "text": "Hi there", "finish_reason": "length", "token_ids": (5, 6),
             "token_spans": ((0, 2), (2, 8)), "token_origins": (0, 0), "token_times": (0.1, 0.2),
             "stats": {"wall_s": 0.2}}
    other = {**track, "drafter": "pld", "token_origins": (0, 1), "token_times": (0.1, 0.1)}
    comparison_id = store.save_comparison(
        {"prompt": "Say hi", "target": "embedded", "draft": None, "settings": {"seed": 3}, "greedy": True,
         "identical": True}, [track, other],
        [make_run(drafter="none"), make_run(drafter="pld", speedup=2.0, speedup_basis="measured")])
    [info] = store.list_comparisons()
    assert (info.id, info.prompt, info.drafters, info.identical, info.settings) == (
        comparison_id, "Say hi", ("none", "pld"), True, {"seed": 3})
    loaded = store.comparison(comparison_id)
    assert [t.drafter for t in loaded.tracks] == ["none", "pld"]
    assert loaded.tracks[1].token_spans == ((0, 2), (2, 8)) and loaded.tracks[1].token_times == (0.1, 0.1)
    assert [(r.source, r.comparison_id) for r in store.runs()] == [("race", comparison_id)] * 2
    assert store.delete_comparison(comparison_id) and store.runs() == [] and store.list_comparisons() == []
    with pytest.raises(StorageError, match="does not exist"):
        store.comparison(comparison_id)


def test_a_comparison_with_a_bad_run_is_not_saved_at_all(store):
    track = {"drafter": "none", "text": "", "token_ids": [], "token_spans": [], "token_origins": [],
             "token_times": []}
    with pytest.raises(StorageError):
        store.save_comparison({"prompt": "x", "target": "t", "greedy": True}, [track], [{"drafter": "none"}])
    assert store.list_comparisons() == []
    with pytest.raises(StorageError, match="at least one track"):
        store.save_comparison({"prompt": "x", "target": "t", "greedy": True}, [])


def test_a_run_record_has_exactly_the_columns_of_generation_runs():
    import dataclasses

    from specchat.storage import RunRecord
    from specchat.storage.tables import GenerationRun

    columns = {c.key for c in GenerationRun.__table__.columns} - {"id"}
    assert {field.name for field in dataclasses.fields(RunRecord)} == columns
