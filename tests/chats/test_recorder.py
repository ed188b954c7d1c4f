"""ReplyRecorder without Qt: a chat reply's message row and run row from the placeholder to the finished, stopped or
failed reply, on a real database file, with storage faults injected into the Store as tests/faults does."""

import pytest

from specchat.chats import Conversations, ReplyRecorder, ReplySpans, RunBook, RunContext, RunModels, title_for
from specchat.core.errors import StorageError
from specchat.core.vocabulary import INTERRUPTED, STREAMING, Origin
from specchat.engine.decoding.events import GenerationResult, GenerationStats
from specchat.engine.decoding.speculative import GenerationConfig

REPLY = "Hello there"
SPANS = ReplySpans.from_json([[0, 5, "draft"], [5, 11, "target"]])  # REPLY's: "Hello" drafted, " there" not
HELLO = ReplySpans.from_json([[0, 5, "draft"]])  # the spans of "Hello", the reply so far


@pytest.fixture
def context():
    models = RunModels("tiny", "cpu", exactness="bit-identical")
    return RunContext(GenerationConfig(k=4, adaptive_k=True, seed=11), models, "pld")


@pytest.fixture
def runs(store):
    return RunBook(store, store.start_app_session("test"))


@pytest.fixture
def recorder(store, runs):
    return ReplyRecorder(store, runs)


@pytest.fixture
def chat(store):
    chat = Conversations(store).start("Say hello")
    Conversations(store).add_user_message(chat.id, "Say hello")
    return chat


def failing(monkeypatch, store, name, error="database or disk is full"):
    """Store.<name> raises StorageError, as a full disk or a lock makes it; returns the calls it got."""
    calls = []

    def fail(*args, **kwargs):
        calls.append(args)
        raise StorageError(f"could not save: {error}")

    monkeypatch.setattr(store, name, fail)
    return calls


def stats(new_tokens: int) -> GenerationStats:
    return GenerationStats(prompt_tokens=7, new_tokens=new_tokens, target_passes=max(new_tokens // 2, 1),
                           draft_proposed=new_tokens, draft_accepted=new_tokens // 2, wall_s=0.5)


def result(text: str = REPLY, finish_reason: str = "eos", tokens: int = 4) -> GenerationResult:
    """A reply of `tokens` tokens as the engine ends it (the recorder stores the spans it is given, not these)."""
    return GenerationResult(text=text, token_ids=tuple(range(tokens)), origins=(Origin.DRAFT,) * tokens,
                            spans=tuple((i, i + 1) for i in range(tokens)), finish_reason=finish_reason,
                            stats=stats(tokens), seed=11)


def reply_row(store, chat):
    return [m for m in store.messages(chat.id) if m.role == "assistant"][-1]


def test_begin_writes_a_streaming_placeholder_and_run(store, recorder, chat, context):
    reply = recorder.begin(chat.id, prompt_tokens=7, context=context)
    message = reply_row(store, chat)
    assert (reply.conversation_id, reply.message_id, reply.context) == (chat.id, message.id, context)
    assert (message.text, message.stopped, message.finish_reason) == ("", True, STREAMING)
    run = store.run_for_message(message.id)
    assert (run.id, run.finish_reason, run.drafter, run.k) == (reply.run_id, STREAMING, "pld", 4)


def test_begin_partial_finish_leaves_the_reply_and_a_complete_run(store, recorder, runs, chat, context):
    runs.plain_tokens_per_s = 4.0
    reply = recorder.begin(chat.id, 7, context)
    saved = recorder.partial(reply, "Hello", HELLO, stats(2))
    assert (saved.new_tokens, saved.finish_reason) == (2, STREAMING)  # the run as it now stands, not read back
    so_far = reply_row(store, chat)
    assert (so_far.text, so_far.spans, so_far.finish_reason) == ("Hello", ((0, 5, "draft"),), STREAMING)
    assert store.run_for_message(reply.message_id).new_tokens == 2  # the run's figures so far, with the text
    recorder.finish(reply, result(), SPANS)
    message = reply_row(store, chat)
    assert (message.text, message.spans) == (REPLY, ((0, 5, "draft"), (5, 11, "target")))
    assert (message.stopped, message.finish_reason) == (False, "eos")
    run = store.run_for_message(message.id)
    assert (run.id, run.finish_reason, run.new_tokens, run.speedup_basis) == (reply.run_id, "eos", 4, "calibrated")
    assert store.conversation_stats(chat.id).runs == 1  # completed, not recorded twice


def test_a_stopped_reply_is_kept_as_stopped(store, recorder, chat, context):
    reply = recorder.begin(chat.id, 7, context)
    recorder.finish(reply, result("Hello", "cancelled", tokens=1), HELLO)
    message = reply_row(store, chat)
    assert (message.text, message.stopped, message.finish_reason) == ("Hello", True, "cancelled")
    assert store.run_for_message(message.id).finish_reason == "cancelled"


def test_a_reply_stopped_before_its_first_token_deletes_its_run(store, recorder, chat, context):
    reply = recorder.begin(chat.id, 7, context)
    recorder.finish(reply, result("", "cancelled", tokens=0), ReplySpans())
    message = reply_row(store, chat)
    assert (message.text, message.stopped) == ("", True)
    assert store.run_for_message(message.id) is None and store.conversation_stats(chat.id).runs == 0


def test_fail_keeps_the_partial_text_and_marks_the_run(store, recorder, chat, context):
    reply = recorder.begin(chat.id, 7, context)
    recorder.partial(reply, "Hello", HELLO, stats(2))
    recorder.fail(reply, "Hello", HELLO)
    message = reply_row(store, chat)
    assert (message.text, message.spans, message.stopped) == ("Hello", ((0, 5, "draft"),), True)
    assert message.finish_reason == "error" and store.run_for_message(message.id).finish_reason == "error"


def test_a_run_that_cannot_be_marked_failed_is_left_for_the_next_start(store, recorder, chat, context, monkeypatch):
    reply = recorder.begin(chat.id, 7, context)
    calls = failing(monkeypatch, store, "update_run", "database is locked")
    recorder.fail(reply, "Hel", ReplySpans())  # the reply is saved: no error to report
    assert calls and reply_row(store, chat).finish_reason == "error"
    assert store.run_for_message(reply.message_id).finish_reason == STREAMING
    monkeypatch.undo()
    store.recover_interrupted()
    assert store.run_for_message(reply.message_id).finish_reason == INTERRUPTED


def test_a_refused_partial_save_raises_and_the_next_one_saves(store, recorder, chat, context, monkeypatch):
    """The window catches StorageError, says it once, and keeps streaming; the next save tries again."""
    reply = recorder.begin(chat.id, 7, context)
    calls = failing(monkeypatch, store, "save_partial_reply")
    with pytest.raises(StorageError, match="database or disk is full"):
        recorder.partial(reply, "Hello", HELLO, stats(2))
    assert calls and reply_row(store, chat).text == ""  # what is kept: the placeholder
    monkeypatch.undo()  # the disk has room again
    recorder.partial(reply, "Hello", HELLO, stats(2))
    assert reply_row(store, chat).text == "Hello"


def test_a_refused_finished_reply_raises_and_leaves_the_placeholder(store, recorder, chat, context, monkeypatch):
    reply = recorder.begin(chat.id, 7, context)
    failing(monkeypatch, store, "update_message")
    with pytest.raises(StorageError):
        recorder.finish(reply, result(), SPANS)
    message = reply_row(store, chat)
    assert (message.text, message.stopped, message.finish_reason) == ("", True, STREAMING)
    with pytest.raises(StorageError):
        recorder.fail(reply, "Hello", HELLO)


def test_a_failed_statistics_write_raises_after_the_reply_is_saved(store, recorder, runs, chat, context, monkeypatch):
    def locked(*run):
        raise StorageError("could not save: database is locked")

    monkeypatch.setattr(runs, "complete", locked)
    reply = recorder.begin(chat.id, 7, context)
    with pytest.raises(StorageError, match="locked"):
        recorder.finish(reply, result(), SPANS)
    assert reply_row(store, chat).text == REPLY and reply_row(store, chat).finish_reason == "eos"


def test_complete_run_gets_what_the_reply_ran_with(store, recorder, runs, chat, context, monkeypatch):
    completed = []
    monkeypatch.setattr(runs, "complete", lambda *run: completed.append(run))
    reply = recorder.begin(chat.id, 7, context)
    finished = result()
    recorder.finish(reply, finished, SPANS)
    assert completed == [(chat.id, reply.message_id, finished, context, reply.run_id, None)]


def test_conversations_title_and_regenerate(store):
    conversations = Conversations(store)
    assert title_for("x" * 60 + "\nmore") == "x" * 48 + "…" and title_for("Short\nsecond") == "Short"
    chat = conversations.start("What is the sea?")
    assert chat.title == "What is the sea?" and conversations.find("sea")[0].id == chat.id
    conversations.add_user_message(chat.id, "What is the sea?")
    store.add_message(chat.id, "assistant", "Water.")
    opened = conversations.open(chat.id)
    assert opened.question_as_read() == "What is the sea?"  # no document: the question alone
    conversations.branch_before(opened, opened.last_reply())  # Regenerate: the reply stays, one flip away
    assert [m.role for m in conversations.messages(chat.id)] == ["user"] and opened.last_reply() is None
    asked = conversations.messages(chat.id)[0]
    assert conversations.message(chat.id, asked.id) == asked and conversations.message(None, asked.id) is None
    conversations.set_system_prompt(chat.id, "Be brief.")
    assert conversations.system_prompt(chat.id) == "Be brief."
    assert conversations.rename(chat.id, "Sea").title == "Sea" and conversations.delete(chat.id)
    assert conversations.find() == []


def test_a_reply_with_nothing_drafted_says_so_and_claims_no_ratio(store, recorder, runs, chat, context):
    runs.plain_tokens_per_s = 4.0
    reply = recorder.begin(chat.id, 7, context)
    plain = result()
    plain.stats.draft_proposed = plain.stats.draft_accepted = 0
    plain.stats.target_passes = 4
    recorder.finish(reply, plain, SPANS)
    run = store.run_for_message(reply.message_id)
    assert run.speedup is None and run.speedup_basis is None  # a speed difference without drafts is noise
    footer = runs.footer(reply.message_id)
    assert "decoded plainly (nothing worth drafting)" in footer
    assert "vs plain" not in footer and "accepted" not in footer and "same distribution" not in footer
    assert store.conversation_stats(chat.id).mean_speedup is None


def test_a_drafted_reply_keeps_its_ratio_and_basis(store, recorder, runs, chat, context):
    runs.plain_tokens_per_s = 4.0
    reply = recorder.begin(chat.id, 7, context)
    recorder.finish(reply, result(), SPANS)
    footer = runs.footer(reply.message_id)
    assert "× vs plain (calibrated)" in footer and "accepted 50%" in footer and "nothing worth" not in footer


def test_a_reply_with_hardly_any_drafts_kept_claims_no_ratio(store, recorder, runs, chat, context):
    runs.plain_tokens_per_s = 4.0
    reply = recorder.begin(chat.id, 7, context)
    few = result(tokens=4)
    few.stats.new_tokens, few.stats.draft_proposed, few.stats.draft_accepted = 50, 3, 1
    recorder.finish(reply, few, SPANS)
    assert store.run_for_message(reply.message_id).speedup is None
    footer = runs.footer(reply.message_id)
    assert "decoded almost plainly (1 drafted token kept)" in footer and "vs plain" not in footer
