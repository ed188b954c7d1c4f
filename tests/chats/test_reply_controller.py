"""The reply controller without Qt, on a real database file: what each call returns to draw, the prompt fitted once,
the steps gathered by the controller (what partial saves write), and the ended reply's rows and footer from what was
written, never read back."""

import pytest
from store_calls import count_calls

from specchat.chats import (Conversations, OpenChat, ReplyBegan, ReplyController, ReplyEnded, ReplyEngine,
                            ReplyRecorder, RunBook, RunContext, RunModels, StepBatch, StepsArrived, reply_controller)
from specchat.chats.run_book import footer_text
from specchat.core.errors import PromptError, StorageError
from specchat.core.run_kind import AWAITING_COSTS
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
def controller(store, runs):
    return ReplyController(ReplyRecorder(store, runs))


@pytest.fixture
def reads(store, monkeypatch):
    """The Store's reads of a chat's rows, by name."""
    return count_calls(store, READS, monkeypatch)


class WordTokenizer:
    """One token a word: the plan only counts."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class Fitter:
    """A PromptFitter's face: what the controller asks of it (fit, and the tokenizer and window the plan counts
    with), each fit recorded."""

    def __init__(self, fitted: list, left_out: int = 0, refuse: Exception | None = None):
        self.fitted, self.left_out, self.refuse = fitted, left_out, refuse
        self.tokenizer, self.window = WordTokenizer(), 4096

    def fit(self, messages, system, max_new_tokens):
        if self.refuse is not None:
            raise self.refuse
        self.fitted.append((len(messages), system, max_new_tokens))
        return FittedPrompt((1, 2, 3), self.left_out)


def engine(fitted: list, left_out: int = 0, refuse: Exception | None = None) -> ReplyEngine:
    context = RunContext(GenerationConfig(max_new_tokens=8, k=4, adaptive_k=False), RunModels("tiny", "cpu"), "pld")
    return ReplyEngine(context, lambda: None, Fitter(fitted, left_out, refuse))


def step(offset: int, text: str, origins: tuple, new_tokens: int, rejected: str = "") -> StepEvent:
    """One step of `text` from `offset`, one character a token."""
    spans = tuple((offset + i, offset + i + 1) for i in range(len(text)))
    stats = GenerationStats(prompt_tokens=3, new_tokens=new_tokens, target_passes=new_tokens,
                            draft_proposed=new_tokens, draft_accepted=new_tokens // 2, wall_s=0.5)
    return StepEvent(token_ids=tuple(range(len(text))), origins=origins, spans=spans, text_delta=text,
                     text_offset=offset, rejected_ids=(9,) if rejected else (), rejected_text=rejected, stats=stats,
                     wall_s=0.5)


def batch(*events: StepEvent) -> StepBatch:
    """A frame's steps as the worker sends them: the statistics as of the last."""
    return StepBatch(events, events[-1].stats.copy())


def result(text: str, origins: tuple) -> GenerationResult:
    stats = GenerationStats(prompt_tokens=3, new_tokens=len(text), target_passes=3, draft_proposed=4,
                            draft_accepted=3, wall_s=0.5)
    return GenerationResult(text=text, token_ids=tuple(range(len(text))), origins=origins,
                            spans=tuple((i, i + 1) for i in range(len(text))), finish_reason="eos", stats=stats,
                            seed=7)


D, T = Origin.DRAFT, Origin.TARGET


def test_a_reply_fits_once_gathers_its_steps_and_ends_from_what_it_wrote(store, controller, runs, chat, reads,
                                                                         monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)
    fitted = []
    began = controller.start(chat, engine(fitted), seed=7)
    job = began.job
    assert fitted == [(1, None, 8)] and job.prompt_ids == (1, 2, 3) and job.config.seed == 7
    assert began == ReplyBegan(chat.conversation_id, controller.active.message_id, job, "")
    arrived = controller.steps(batch(step(0, "He", (D, D), 2, rejected="x"), step(2, "y", (T,), 3)), now=1.0)
    assert isinstance(arrived, StepsArrived) and len(arrived.events) == 2 and arrived.trouble is None
    assert arrived.stats.new_tokens == 3  # the status bar's figures: as of the frame's last step
    saved = store.messages(chat.conversation_id)[-1]  # (the test reads; the controller does not)
    reads.clear()
    assert (saved.text, saved.spans) == ("Hey", ((0, 2, "draft"), (2, 3, "target")))  # the controller's gathering
    assert controller.active.spans.rejected == [(2, "x")]
    ended = controller.finish(result("Hey", (D, D, T)))
    assert isinstance(ended, ReplyEnded) and ended.saved and ended.runs_changed and ended.problem is None
    assert (ended.text, ended.spans.to_json(), ended.spans.rejected) == ("Hey", [[0, 2, "draft"], [2, 3, "target"]],
                                                                         [(2, "x")])
    assert reads == []  # the reply, its footer included, came from what was written
    assert ended.footer == runs.footer(ended.message_id) and chat.footers[ended.message_id] == ended.footer
    assert [m.id for m in chat.messages] == [m.id for m in store.messages(chat.conversation_id)]
    assert controller.active is None and controller.rejected[ended.message_id] == [(2, "x")]


def test_a_failed_reply_keeps_what_it_streamed_and_its_footer_says_so(store, controller, runs, chat, monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)
    controller.start(chat, engine([]))
    controller.steps(batch(step(0, "Hi", (D, T), 2)), now=1.0)
    ended = controller.fail("The device ran out of memory.")
    assert ended.saved and ended.problem == "The device ran out of memory." and not ended.runs_changed
    assert ended.text == "Hi" and ended.stopped
    assert ended.footer == runs.footer(ended.message_id) and "ended by an error" in ended.footer


def test_a_refused_save_is_said_once_and_an_unsaved_reply_leaves_the_chat_to_be_read_again(
        store, controller, chat, monkeypatch):
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)

    def full(*args, **kwargs):
        raise StorageError("database or disk is full")

    monkeypatch.setattr(store, "save_partial_reply", full)
    monkeypatch.setattr(store, "update_message", full)
    controller.start(chat, engine([]))
    said = [controller.steps(batch(step(0, "H", (D,), 1)), now=1.0).trouble,
            controller.steps(batch(step(1, "i", (T,), 2)), now=2.0).trouble]
    assert "disk is full" in said[0] and said[1] is None  # said once; saving goes on being tried
    ended = controller.finish(result("Hi", (D, T)))
    assert not ended.saved and ended.footer == "not saved" and "disk is full" in ended.problem
    assert chat.stale  # what is stored of the reply is unsure: the chat is read again before the next one


def test_a_prompt_that_cannot_fit_writes_nothing(store, controller, chat):
    with pytest.raises(PromptError):
        controller.start(chat, engine([], refuse=PromptError("the message does not fit the context window")))
    assert controller.active is None
    assert [m.role for m in store.messages(chat.conversation_id)] == ["user"]


def test_the_footer_reads_a_record_as_written_as_it_reads_a_row(store, runs, chat):
    """footer_text takes the RunRecord RunBook.complete returns and the RunInfo read with a chat alike."""
    plan = engine([])
    context = plan.context.seeded(3)
    message = store.add_message(chat.conversation_id, "assistant", "Hey")
    written = runs.complete(chat.conversation_id, message.id, result("Hey", (D, D, T)), context)
    _, _, stored = store.chat(chat.conversation_id)
    assert footer_text(written) == footer_text(stored[message.id]) == runs.footer(message.id)


def test_a_first_reply_held_back_for_the_costs_says_so_as_written_and_after_a_reopen(store, runs, chat):
    """A model's first reply on this machine decodes plainly while its verification costs are measured
    (SpeculativeEngine._awaits_costs): its footer says that, not "nothing worth drafting", and still does when the
    chat is read again (generation_runs.awaiting_costs, 0008)."""
    context = engine([]).context.seeded(3)
    message = store.add_message(chat.conversation_id, "assistant", "Hey")
    stats = GenerationStats(prompt_tokens=3, new_tokens=3, target_passes=3, wall_s=0.5, awaiting_costs=True)
    held = GenerationResult(text="Hey", token_ids=(0, 1, 2), origins=(T, T, T), spans=((0, 1), (1, 2), (2, 3)),
                            finish_reason="eos", stats=stats, seed=7)
    written = runs.complete(chat.conversation_id, message.id, held, context)
    _, _, stored = store.chat(chat.conversation_id)
    assert AWAITING_COSTS in footer_text(written) and footer_text(written) == footer_text(stored[message.id])
    assert "nothing worth drafting" not in footer_text(stored[message.id])
    other = store.add_message(chat.conversation_id, "assistant", "Hey")
    runs.complete(chat.conversation_id, other.id, result("Hey", (T, T, T)), context)
    assert not store.chat(chat.conversation_id)[2][other.id].awaiting_costs


@pytest.mark.parametrize("drafter, config, words", [
    ("pld", GenerationConfig(max_new_tokens=8, k=4, adaptive_k=False), "prompt lookup, K=4"),
    ("history", GenerationConfig(max_new_tokens=8), "prompt lookup + past replies, adaptive K"),
    ("none", GenerationConfig(max_new_tokens=8), "plain decoding")])
def test_the_footer_names_the_drafter_as_the_status_bar_does(store, runs, chat, drafter, config, words):
    """The footer said the run's stored key ("history, adaptive K") where the status bar says "prompt lookup + past
    replies": one name a thing. Plain decoding has no K to name."""
    context = RunContext(config, RunModels("tiny", "cpu"), drafter).seeded(3)
    message = store.add_message(chat.conversation_id, "assistant", "Hey")
    written = runs.complete(chat.conversation_id, message.id, result("Hey", (T, T, T)), context)
    _, _, stored = store.chat(chat.conversation_id)
    for footer in (footer_text(written), footer_text(stored[message.id])):
        assert words in footer.split(" · ") and "history" not in footer and "K" not in words.split(", ")[0]
