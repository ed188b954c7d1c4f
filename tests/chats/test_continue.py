"""Continuing a reply cut short (chats/continuation.py, ReplyController.continue_reply, SpeculativeEngine.stream's
`continuing`), on real engines and a real database file: a greedy reply cut (by the token limit, by Stop, by a kill)
and continued is, token for token, the reply that was never cut, on llama.cpp's kernels (the embedded SmolLM2 GGUF)
and on a tiny torch model; the message keeps its text, spans and every part's run; what the footer promises; where
Continue is offered; and a save refused while a reply goes on keeps what it had."""

import threading
import time

import pytest

from specchat.chats import (Conversations, OpenChat, ReplyController, ReplyEngine, ReplyRecorder, RunBook,
                            RunContext, RunModels, StepBatch)
from specchat.chats import continuation as continuation_module
from specchat.chats.continuation import can_continue, plan_continuation
from specchat.core.errors import ContinueError, StorageError
from specchat.core.vocabulary import (BIT_IDENTICAL, CANCELLED, CONTEXT, DISTRIBUTION, EOS, ERROR, INTERRUPTED,
                                      LENGTH, STOP, STREAMING)
from specchat.engine.chat_engine import EngineCache, LocalChatEngine, PromptFitter
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.sampling import SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, NoDrafter, PromptLookupDrafter, make_drafter
from specchat.storage.records import MessageInfo, RunInfo, StoredReply

QUESTION = "Write a short story about a robot who learns to paint."


@pytest.fixture
def runs(store):
    return RunBook(store, store.start_app_session("test"))


@pytest.fixture
def controller(store, runs):
    return ReplyController(ReplyRecorder(store, runs))


def asked(store, text: str = QUESTION) -> OpenChat:
    """A new chat holding the user's question."""
    conversations = Conversations(store)
    chat = OpenChat.of(conversations.start(text))
    chat.add(conversations.add_user_message(chat.conversation_id, text))
    return chat


def stream(controller, began, stop_after: int | None = None):
    """Runs began.job as the model thread does (a batch a step, gathered and saved by the controller), setting Stop
    once `stop_after` tokens have come; returns what finish returns."""
    job, cancel, count = began.job, threading.Event(), 0
    engine = job.make_engine()
    for event in engine.stream_ids(job.prompt_ids, job.config, cancel, continuing=job.continuing):
        controller.steps(StepBatch((event,), event.stats.copy()), time.perf_counter())
        count += len(event.token_ids)
        if stop_after is not None and count >= stop_after:
            cancel.set()
        if event.result is not None:
            return controller.finish(event.result)
    raise AssertionError("the stream ended without a result")


# -- the engine: cut, then continued, is the reply never cut -----------------------------------------------------

@pytest.mark.parametrize("drafter", ["none", "pld", "eagle-hybrid"])  # plain; llama.cpp's default; hidden states
def test_a_greedy_reply_cut_and_continued_is_the_uninterrupted_reply_on_llama_cpp(native_pair, drafter):
    """The reply's tokens are read again after its prompt in passes within the kernels' bit-identical rows (a
    prefill would read them on the prompt reader's float16 kernels, and the reply would part from here)."""
    ids = build_prompt_ids(native_pair.target.tokenizer, [Message("user", QUESTION)])
    engine, cut_at, more = native_pair.engine(drafter), 10, 14
    config = GenerationConfig(max_new_tokens=cut_at + more, k=4, adaptive_k=False)
    whole = engine.generate(ids, config)
    cut = engine.generate(ids, GenerationConfig(max_new_tokens=cut_at, k=4, adaptive_k=False))
    went_on = engine.generate(ids, GenerationConfig(max_new_tokens=more, k=4, adaptive_k=False),
                              continuing=cut.token_ids)
    assert cut.token_ids == whole.token_ids[:cut_at] and went_on.token_ids == whole.token_ids[cut_at:]
    assert went_on.text == whole.text and went_on.text_start == len(cut.text)  # the whole reply's text
    assert went_on.spans[0][0] == len(cut.text) and went_on.spans[-1][1] == len(whole.text)
    assert went_on.stats.new_tokens == more and went_on.stats.prompt_tokens == len(ids) + cut_at
    assert drafter == "none" or went_on.stats.draft_proposed > 0  # the continuation drafted, and verified


@pytest.mark.parametrize("drafter", ["none", "pld", "close", "hybrid"])
def test_a_greedy_reply_cut_and_continued_is_the_uninterrupted_reply_on_torch(target, tokenizer, close_draft,
                                                                             prompt_ids, drafter):
    made = {"none": NoDrafter, "pld": PromptLookupDrafter, "close": lambda: ModelDrafter(close_draft),
            "hybrid": lambda: make_drafter("hybrid", close_draft)}[drafter]
    engine = SpeculativeEngine(target, tokenizer, made(), eos_token_ids=[])
    whole = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=60, k=4, adaptive_k=False))
    for cut_at in (1, 17, 33):  # a byte-level vocabulary: some cuts split a character, whose rest comes after
        cut = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=cut_at, k=4, adaptive_k=False))
        went_on = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=60 - cut_at, k=4, adaptive_k=False),
                                  continuing=cut.token_ids)
        assert went_on.token_ids == whole.token_ids[cut_at:] and went_on.text == whole.text


# -- the chat: the same message goes on, both parts kept ---------------------------------------------------------

def llama_reply_engine(pair, drafter: str, max_new_tokens: int) -> ReplyEngine:
    engines = EngineCache(pair)
    config = GenerationConfig(max_new_tokens=max_new_tokens, k=4, adaptive_k=False)
    return ReplyEngine(RunContext.of_pair(pair, drafter, config), lambda: engines.chat_engine(drafter),
                       engines.fitter())


def test_stop_then_continue_gives_the_uninterrupted_reply_with_both_runs_kept(native_pair, store, controller):
    chat, engine = asked(store), llama_reply_engine(native_pair, "pld", 14)
    began = controller.start(chat, engine, seed=1)
    stopped = stream(controller, began, stop_after=6)
    cut = store.stored_reply(stopped.message_id)
    assert cut.message.finish_reason == CANCELLED and cut.message.stopped and can_continue(cut.message)
    assert len(cut.token_ids) >= 6 and cut.message.text == stopped.text  # ids and text saved together
    went_on = controller.continue_reply(chat, engine, stopped.message_id, seed=2)
    assert went_on.message_id == stopped.message_id and went_on.text == stopped.text
    assert went_on.job.continuing == cut.token_ids and went_on.job.prompt_ids == began.job.prompt_ids
    ended = stream(controller, went_on)
    whole = engine.make_engine().engine.generate(began.job.prompt_ids, GenerationConfig(
        max_new_tokens=len(cut.token_ids) + 14, k=4, adaptive_k=False))
    final = store.stored_reply(stopped.message_id)
    assert final.token_ids == whole.token_ids and final.message.text == whole.text == ended.text
    assert final.message.finish_reason == whole.finish_reason and not final.message.stopped
    spans, earlier = final.message.spans, cut.message.spans  # the first part's, then the new ones after its text
    assert spans[:len(earlier) - 1] == earlier[:-1] and spans[len(earlier) - 1][0] == earlier[-1][0]
    assert spans[-1][1] == len(whole.text)
    more = len(whole.token_ids) - len(cut.token_ids)
    assert [(run.new_tokens, run.parts) for run in final.runs] == [(len(cut.token_ids), 1), (more, 2)]
    assert final.runs[1].prompt_tokens == len(began.job.prompt_ids) + len(cut.token_ids)
    assert final.runs[1].exactness == BIT_IDENTICAL and ended.runs_changed
    assert ended.footer.startswith(f"continued, part 2 (bit-identical to one uninterrupted reply) · {more} tokens")
    assert [m.id for m in chat.messages] == [chat.messages[0].id, stopped.message_id]  # in its own place
    reopened = Conversations(store).open(chat.conversation_id)
    assert reopened.footers[stopped.message_id] == ended.footer  # read back: the last part, said so
    assert store.conversation_stats(chat.conversation_id).new_tokens == len(whole.token_ids)  # both parts counted


# -- the tiny torch model in the chat: a kill, a reply without its tokens, a refused save ------------------------

@pytest.fixture
def tiny_engine(target, tokenizer):
    """The tiny target decoding plainly as a chat's ReplyEngine (no end-of-turn token: replies run to the limit)."""
    def made(max_new_tokens: int = 12, temperature: float = 0.0) -> ReplyEngine:
        config = GenerationConfig(max_new_tokens=max_new_tokens, k=4, adaptive_k=False,
                                  sampling=SamplingParams(temperature=temperature))
        engine = LocalChatEngine(SpeculativeEngine(target, tokenizer, NoDrafter(), eos_token_ids=[]))
        context = RunContext(config, RunModels("tiny", "cpu", exactness=BIT_IDENTICAL), "none")
        return ReplyEngine(context, lambda: engine, PromptFitter(tokenizer, engine.engine.context_window))
    return made


def test_a_reply_cut_by_a_kill_continues_from_its_last_save(store, tiny_engine, monkeypatch):
    from specchat.chats import reply_controller

    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)  # every step saved, as a second's worth is
    chat, engine = asked(store, "The quick brown fox"), tiny_engine(40)
    killed = ReplyController(ReplyRecorder(store, RunBook(store, store.start_app_session("killed"))))
    began = killed.start(chat, engine, seed=1)
    job = began.job
    for event, _ in zip(job.make_engine().stream_ids(job.prompt_ids, job.config), range(9)):
        killed.steps(StepBatch((event,), event.stats.copy()), time.perf_counter())  # then the process dies
    assert store.recover_interrupted() == 1  # the next start
    chat = Conversations(store).open(chat.conversation_id)
    cut = store.stored_reply(began.message_id)
    assert cut.message.finish_reason == INTERRUPTED and can_continue(chat.last_reply()) and len(cut.token_ids) == 9
    restarted = ReplyController(ReplyRecorder(store, RunBook(store, store.start_app_session("next"))))
    ended = stream(restarted, restarted.continue_reply(chat, engine, began.message_id))
    whole = engine.make_engine().engine.generate(job.prompt_ids, GenerationConfig(max_new_tokens=9 + 40, k=4,
                                                                                  adaptive_k=False))
    final = store.stored_reply(began.message_id)
    assert final.token_ids == whole.token_ids and final.message.text == whole.text == ended.text
    assert [run.finish_reason for run in final.runs] == [INTERRUPTED, LENGTH]


def test_a_reply_whose_tokens_were_not_kept_goes_on_from_its_text_and_says_so(store, controller, tiny_engine,
                                                                              tokenizer):
    chat = asked(store, "The quick brown fox")
    old = store.add_message(chat.conversation_id, "assistant", "jumps over the lazy", stopped=True,
                            spans=[[0, 5, "draft"]], finish_reason=CANCELLED)  # as written before 0007
    chat.add(old)
    began = controller.continue_reply(chat, tiny_engine(8), old.id, seed=3)
    assert "its text is read again" in began.note
    assert began.job.continuing == tuple(tokenizer("jumps over the lazy", add_special_tokens=False)["input_ids"])
    ended = stream(controller, began)
    final = store.stored_reply(old.id)
    assert ended.text.startswith("jumps over the lazy") and final.message.text == ended.text
    assert final.message.spans[0] == (0, 5, "draft")  # the stored spans stay
    assert final.token_ids[:len(began.job.continuing)] == began.job.continuing and len(final.token_ids) == \
        len(began.job.continuing) + 8
    assert [run.exactness for run in final.runs] == [None]  # the continuation's run: it promises nothing
    assert "bit-identical" not in ended.footer and "its text is read again" in ended.note


def test_a_save_refused_while_a_reply_goes_on_keeps_what_it_had(store, controller, tiny_engine, monkeypatch):
    from specchat.chats import reply_controller

    chat, engine = asked(store, "The quick brown fox"), tiny_engine(8)
    first = stream(controller, controller.start(chat, engine, seed=1))
    kept = store.stored_reply(first.message_id)
    assert kept.message.finish_reason == LENGTH and len(kept.token_ids) == 8

    def refused(*args, **kwargs):
        raise StorageError("could not save: database or disk is full")

    real_update = store.update_message
    monkeypatch.setattr(store, "update_message", refused)  # it cannot even begin: nothing is changed
    with pytest.raises(StorageError):
        controller.continue_reply(chat, engine, first.message_id)
    assert store.stored_reply(first.message_id).message == kept.message and controller.active is None
    chat = Conversations(store).open(chat.conversation_id)  # (a refused write makes the window read it again)
    calls = []

    def resumes_then_refuses(message_id, **changes):  # the continuation begins, then every save is refused
        calls.append(changes)
        if len(calls) == 1:
            return real_update(message_id, **changes)
        raise StorageError("could not save: database or disk is full")

    monkeypatch.setattr(store, "update_message", resumes_then_refuses)
    monkeypatch.setattr(store, "save_partial_reply", refused)
    monkeypatch.setattr(reply_controller, "SAVE_PARTIAL_S", 0.0)
    ended = stream(controller, controller.continue_reply(chat, engine, first.message_id))
    assert not ended.saved and "could not be saved" in ended.problem and ended.text.startswith(first.text)
    assert len(ended.text) > len(first.text)  # on screen, whole
    store.recover_interrupted()  # the next start: the reply as saved before it went on, cut short again
    after = store.stored_reply(first.message_id)
    assert (after.message.text, after.token_ids, after.message.spans) == (first.text, kept.token_ids,
                                                                         kept.message.spans)
    assert after.message.finish_reason == INTERRUPTED and can_continue(after.message)


# -- what is offered, and what it promises -------------------------------------------------------------------------

def message(finish_reason, role="assistant", text="Some text") -> MessageInfo:
    return MessageInfo(id=7, conversation_id=1, position=1, role=role, text=text, created_at=None,
                       finish_reason=finish_reason)


def test_continue_is_offered_for_a_reply_cut_short_only():
    for ending in (CANCELLED, LENGTH, CONTEXT, INTERRUPTED):
        assert can_continue(message(ending))
    for ending in (EOS, STOP, ERROR, STREAMING, None):
        assert not can_continue(message(ending))
    assert not can_continue(message(LENGTH, role="user")) and not can_continue(message(LENGTH, text=""))
    assert not can_continue(None)


def test_only_the_chats_last_reply_cut_short_goes_on(store, controller, tiny_engine):
    chat, engine = asked(store, "The quick brown fox"), tiny_engine(4)
    first = stream(controller, controller.start(chat, engine, seed=1))
    chat.add(Conversations(store).add_user_message(chat.conversation_id, "And then?"))
    with pytest.raises(ContinueError, match="last reply"):
        controller.continue_reply(chat, engine, first.message_id)
    second = stream(controller, controller.start(chat, engine, seed=1))
    store.update_message(second.message_id, finish_reason=EOS)
    chat = Conversations(store).open(chat.conversation_id)
    with pytest.raises(ContinueError, match="cut short"):
        controller.continue_reply(chat, engine, second.message_id)
    remote = ReplyEngine(engine.context, engine.make_engine)  # no fitter: a remote engine's
    store.update_message(second.message_id, finish_reason=LENGTH)
    chat = Conversations(store).open(chat.conversation_id)
    with pytest.raises(ContinueError, match="remote"):
        controller.continue_reply(chat, remote, second.message_id)
    assert len(store.stored_reply(second.message_id).runs) == 1  # nothing was written


def run_info(prompt_tokens, temperature=0.0, exactness=BIT_IDENTICAL, target="tiny") -> RunInfo:
    return RunInfo(id=1, message_id=7, drafter="none", k=4, adaptive=False, new_tokens=3, target_passes=3,
                   draft_proposed=0, draft_accepted=0, tokens_per_s=1.0, speedup=None, speedup_basis=None,
                   finish_reason=LENGTH, exactness=exactness, temperature=temperature, target=target,
                   prompt_tokens=prompt_tokens)


def test_what_a_continuation_promises(store, tiny_engine):
    chat = asked(store, "The quick brown fox")
    engine = tiny_engine(4)
    prompt = engine.prompts.fit([Message("user", "The quick brown fox")], None, 4).ids
    chat.add(message(LENGTH))
    stored = StoredReply(message(LENGTH), (5, 6, 7), (run_info(len(prompt)),))

    def promise(reply=stored, context=engine.context):
        going_on = plan_continuation(chat, reply, engine.prompts, context)
        assert going_on.prompt.ids == prompt or going_on.exactness is None
        return going_on.exactness, going_on.note

    sampled = tiny_engine(4, temperature=0.8).context
    fastest = RunContext(engine.context.config, RunModels("tiny", "cpu", exactness=DISTRIBUTION), "none")
    assert promise() == (BIT_IDENTICAL, "")
    assert promise(context=sampled) == (DISTRIBUTION, continuation_module.SAMPLED)
    assert promise(StoredReply(stored.message, stored.token_ids, (run_info(len(prompt), temperature=0.7),))) == \
        (DISTRIBUTION, continuation_module.SAMPLED)
    assert promise(context=fastest) == (DISTRIBUTION, continuation_module.FASTEST_KERNELS)
    assert promise(StoredReply(stored.message, stored.token_ids, (run_info(len(prompt) + 1),))) == \
        (None, continuation_module.PROMPT_CHANGED)
    assert promise(StoredReply(stored.message, None, stored.runs)) == (None, continuation_module.NOT_KEPT)
    assert promise(StoredReply(stored.message, stored.token_ids, (run_info(len(prompt), target="other"),))) == \
        (None, continuation_module.NOT_KEPT)  # another model's tokens mean nothing to this one


def test_a_reply_that_fills_the_window_goes_on_after_a_shorter_prompt(store, tiny_engine):
    chat, engine = asked(store, "The quick brown fox jumps over the lazy dog. " * 6), tiny_engine(4)
    for role, text in (("assistant", "jumps over"), ("user", "Again, please")):
        chat.add(store.add_message(chat.conversation_id, role, text))
    window, prompt = engine.prompts.window, engine.prompts.fit(chat.history(), None, 4).ids
    filled = StoredReply(message(CONTEXT), tuple(range(3, 3 + window - len(prompt) + 5)), (run_info(len(prompt)),))
    chat.add(message(CONTEXT))
    going_on = plan_continuation(chat, filled, engine.prompts, engine.context)
    assert (going_on.exactness, going_on.note) == (None, continuation_module.NO_ROOM)
    assert len(going_on.prompt.ids) + len(going_on.written) < window
    with pytest.raises(ContinueError, match="fills the model's context window"):
        plan_continuation(chat, StoredReply(message(CONTEXT), tuple(range(3, window - 2)), filled.runs),
                          engine.prompts, engine.context)
