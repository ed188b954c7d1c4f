"""The reply controller without Qt, on a real database file: its events in order, the prompt fitted once, the steps
gathered by the controller (what partial saves write), and the ended reply's rows and footer from what was
written, never read back."""

import pytest
from store_calls import count_calls

from specchat.chats import (Conversations, OpenChat, ReplyBegan, ReplyController, ReplyEnded, ReplyEngine,
                            ReplyRecorder, ReplyTrouble, RunBook, RunContext, RunModels, StepsArrived, reply_controller)
from specchat.chats.run_book import footer_text
from specchat.core.errors import PromptError, StorageError
from specchat.core.vocabulary import Origin
from specchat.engine.chat_engine import FittedPrompt
from specchat.engine.decoding.events import GenerationResult, GenerationStats, StepEvent
from specchat.engine.decoding.speculative import GenerationConfig

READS = ("messages", "chat", "conversation", "run_for_message")


@pytest.fixture
def runs(store):
    return RunBook(store, store.start_app_session("test"))


@pytest.fixture
def chat(store):
    conversations = Conversations(store)
    chat = OpenChat.of(conversations.start("Say hello"))
    chat.add(conversations.add_user_message(chat.conversation_id, "Say hello"))
    return chat


@pytest.fixture
def events():
    return []


@pytest.fixture
def controller(store, runs, events):
    return ReplyController(ReplyRecorder(store, runs), events.append)


@pytest.fixture
def reads(store, monkeypatch):
    """The Store's reads of a chat's rows, by name."""
    return count_calls(store, READS, monkeypatch)


def engine(fitted: list, left_out: int = 0) -> ReplyEngine:
    def fit(messages, system, max_new_tokens):
        fitted.append((len(messages), system, max_new_tokens))
        return FittedPrompt((1, 2, 3), left_out)

    context = RunContext(GenerationConfig(max_new_tokens=8, k=4, adaptive_k=False), RunModels("tiny", "cpu"), "pld")
    return ReplyEngine(context, lambda: None, fit)


def step(offset: int, text: str, origins: tuple, new_tokens: int, rejected: str = "") -> StepEvent:
    """One step of `text` from `offset`, one character a token."""
    spans = tuple((offset + i, offset + i + 1) for i in range(len(text)))
    stats = GenerationStats(prompt_tokens=3, new_tokens=new_tokens, target_passes=new_tokens,
                            draft_proposed=new_tokens, draft_accepted=new_tokens // 2, wall_s=0.5)
    return StepEvent(step=1, token_ids=tuple(range(len(text))), origins=origins, spans=spans, text_delta=text,
                     text_offset=offset, rejected_ids=(9,) if rejected else (), rejected_text=rejected, stats=stats)


def result(text: str, origins: tuple) -> GenerationResult:
    stats = GenerationStats(prompt_tokens=3, new_tokens=len(text), target_passes=3, draft_proposed=4,
                            draft_accepted=3, wall_s=0.5)
    return GenerationResult(text=text, token_ids=tuple(range(len(text))), origins=origins,
                            spans=tuple((i, i + 1) for i in range(len(text))), finish_reason="eos", stats=stats,
                            seed=7)


D, T = Origin.DRAFT, Origin.TARGET


def test_a_reply_fits_once_gathers_its_steps_and_ends_from_what_it_wrote(store, controller, runs, chat, events,
                                                                         reads, monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)
    fitted = []
    job = controller.start(chat, engine(fitted), seed=7)
    assert fitted == [(1, None, 8)] and job.prompt_ids == (1, 2, 3) and job.config.seed == 7
    assert events == [ReplyBegan(chat.conversation_id, controller.active.message_id, "")]
    controller.steps([step(0, "He", (D, D), 2, rejected="x"), step(2, "y", (T,), 3)], now=1.0)
    assert isinstance(events[-1], StepsArrived) and len(events[-1].events) == 2
    saved = store.messages(chat.conversation_id)[-1]  # (the test reads; the controller does not)
    reads.clear()
    assert (saved.text, saved.spans) == ("Hey", ((0, 2, "draft"), (2, 3, "target")))  # the controller's gathering
    assert controller.active.spans.rejected == [(2, "x")]
    controller.finish(result("Hey", (D, D, T)))
    ended = events[-1]
    assert isinstance(ended, ReplyEnded) and ended.saved and ended.runs_changed and ended.problem is None
    assert (ended.text, ended.spans.to_json(), ended.spans.rejected) == ("Hey", [[0, 2, "draft"], [2, 3, "target"]],
                                                                         [(2, "x")])
    assert reads == []  # the reply, its footer included, came from what was written
    assert ended.footer == runs.footer(ended.message_id) and chat.footers[ended.message_id] == ended.footer
    assert [m.id for m in chat.messages] == [m.id for m in store.messages(chat.conversation_id)]
    assert controller.active is None and controller.rejected[ended.message_id] == [(2, "x")]


def test_a_failed_reply_keeps_what_it_streamed_and_its_footer_says_so(store, controller, runs, chat, events,
                                                                      monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)
    controller.start(chat, engine([]))
    controller.steps([step(0, "Hi", (D, T), 2)], now=1.0)
    controller.fail("The device ran out of memory.")
    ended = events[-1]
    assert ended.saved and ended.problem == "The device ran out of memory." and not ended.runs_changed
    assert ended.text == "Hi" and ended.stopped
    assert ended.footer == runs.footer(ended.message_id) and "ended by an error" in ended.footer


def test_a_refused_save_is_said_once_and_an_unsaved_reply_leaves_the_chat_to_be_read_again(
        store, controller, chat, events, monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)

    def full(*args, **kwargs):
        raise StorageError("database or disk is full")

    monkeypatch.setattr(store, "save_partial_reply", full)
    monkeypatch.setattr(store, "update_message", full)
    controller.start(chat, engine([]))
    controller.steps([step(0, "H", (D,), 1)], now=1.0)
    controller.steps([step(1, "i", (T,), 2)], now=2.0)
    assert [type(e) for e in events].count(ReplyTrouble) == 1
    controller.finish(result("Hi", (D, T)))
    ended = events[-1]
    assert not ended.saved and ended.footer == "not saved" and "disk is full" in ended.problem
    assert chat.stale  # what is stored of the reply is unsure: the chat is read again before the next one


def test_a_prompt_that_cannot_fit_writes_nothing(store, controller, chat, events):
    def too_long(messages, system, max_new_tokens):
        raise PromptError("the message does not fit the context window")

    plan = engine([])
    with pytest.raises(PromptError):
        controller.start(chat, ReplyEngine(plan.context, plan.make_engine, too_long))
    assert events == [] and controller.active is None
    assert [m.role for m in store.messages(chat.conversation_id)] == ["user"]


def test_the_footer_reads_a_record_as_written_as_it_reads_a_row(store, runs, chat):
    """footer_text takes the RunRecord RunBook.complete returns and the RunInfo read with a chat alike."""
    plan = engine([])
    context = plan.context.seeded(3)
    message = store.add_message(chat.conversation_id, "assistant", "Hey")
    written = runs.complete(chat.conversation_id, message.id, result("Hey", (D, D, T)), context)
    _, _, stored = store.chat(chat.conversation_id)
    assert footer_text(written) == footer_text(stored[message.id]) == runs.footer(message.id)
