"""The one engine interface: every adapter streams a conversation with the same parameters, the local one gives
exactly the tokens of the engine it wraps, prompts are fitted to the window, and the EngineCache keeps one engine
per drafter and carries what an engine measured to its siblings, but not across `apart` names."""

import inspect

import pytest
import torch

from specchat.bench.peer_engine import PeerEngine, PeerReply
from specchat.core.errors import PromptError
from specchat.engine.chat_engine import ChatEngine, EngineCache, LocalChatEngine, PromptFitter, reply_to
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.drafting.past_replies import SuffixIndex
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource
from specchat.remote import RemoteEngine
from specchat.server.served import ServedModel

CHAT = [Message("user", "The quick brown fox jumps over the lazy dog.")]
CONFIG = GenerationConfig(max_new_tokens=16, k=3, seed=0)


@pytest.fixture
def pair(target, close_draft, tokenizer):
    def loaded(model):
        return LoadedModel(ModelSource("folder", "tiny"), model, tokenizer, torch.device("cpu"), torch.float32)
    return ModelPair(loaded(target), loaded(close_draft))


@pytest.mark.parametrize("adapter", [LocalChatEngine, RemoteEngine, ServedModel, PeerEngine])
def test_every_adapter_streams_a_conversation_with_the_protocols_parameters(adapter):
    expected = list(inspect.signature(ChatEngine.stream).parameters)
    assert list(inspect.signature(adapter.stream).parameters) == expected


def test_the_local_engine_gives_exactly_the_tokens_of_the_engine_it_wraps(pair, tokenizer):
    engine = pair.engine("model")
    events = []
    result = reply_to(LocalChatEngine(engine), CHAT, "Be brief.", CONFIG, on_event=events.append)
    direct = engine.generate(build_prompt_ids(tokenizer, CHAT, "Be brief."), CONFIG)
    assert result.token_ids == direct.token_ids and result.text == direct.text
    assert events[-1].result is result and sum(len(e.token_ids) for e in events) == len(result.token_ids)


def test_a_long_chat_is_fitted_by_leaving_out_its_oldest_turns(tokenizer):
    turns = [Message("user" if i % 2 == 0 else "assistant", f"message number {i} " * 6) for i in range(21)]
    whole = build_prompt_ids(tokenizer, turns)
    fitter = PromptFitter(tokenizer, window=len(whole) // 2)
    fitted = fitter.fit(turns, "Be brief.", max_new_tokens=16)
    assert fitted.left_out > 0 and len(fitted.ids) <= len(whole) // 2 - 16
    assert list(fitted.ids) == build_prompt_ids(tokenizer, turns[fitted.left_out:], "Be brief.")
    assert fitter.fit(turns, "Be brief.", 16) == fitted  # fitted anew, the same
    with pytest.raises(PromptError, match="context window"):
        PromptFitter(tokenizer, window=64).fit([Message("user", "word " * 400)], None, max_new_tokens=16)


def test_the_chat_fits_with_the_fitter_its_engines_use(pair):
    """One fitter, one window: the pair's fitter (what the chat fits with, before any engine is built) is the one
    its engines fit with, on the window their runners hold."""
    engines = EngineCache(pair)
    fitter = engines.fitter()
    assert engines._engines == {}  # made without building an engine
    engine = engines.chat_engine("pld")
    assert engine.prompts == fitter and fitter.window == pair.context_window() == engine.engine.context_window
    assert engines.fitter(whole_prompt=True).whole and not fitter.whole


def test_the_cache_keeps_one_engine_per_drafter_and_history(pair):
    engines = EngineCache(pair)
    first = engines.engine("pld")
    assert engines.engine("pld") is first and engines.chat_engine("pld").engine is first
    reply_to(engines.chat_engine("pld"), CHAT, None, CONFIG)
    history = SuffixIndex()
    reading = engines.engine("pld", history)
    assert reading is not first and reading.drafter.history is history
    assert reading.step_costs is first.step_costs and reading.acceptance is first.acceptance  # measured, kept
    apart = engines.engine("pld", apart="bench mode pld")
    assert apart is not first and apart.step_costs is not first.step_costs  # measured on its own
    engines.clear()
    assert engines.engine("pld") is not first


def test_a_peer_reply_is_one_event_with_the_whole_text(tokenizer):
    ids = tokenizer("a reply from elsewhere", add_special_tokens=False)["input_ids"]
    seen = []

    def run(prompt_ids, limit):
        seen.append((prompt_ids, limit))
        return PeerReply(ids, 0.5, draft_proposed=6, draft_accepted=4)

    peer = PeerEngine(tokenizer, run)
    events = list(peer.stream(CHAT, None, GenerationConfig(max_new_tokens=len(ids))))
    assert seen == [(build_prompt_ids(tokenizer, CHAT), len(ids))]  # the same prompt ids as ours
    [event] = events
    assert event.result.text == "a reply from elsewhere" and event.result.finish_reason == "length"
    assert event.result.stats.wall_s == 0.5 and peer.last.draft_accepted == 4


def test_a_replaced_past_replies_index_lets_its_engine_go_and_whole_prompts_are_not_fitted(pair, tokenizer):
    engines = EngineCache(pair)
    first_index, second_index = SuffixIndex(), SuffixIndex()
    old = engines.engine("pld", first_index)
    new = engines.engine("pld", second_index)  # the setting switched off and on: a new index
    assert new is not old and engines.engine("pld", second_index) is new
    assert engines.engine("pld", first_index) is not old  # the old engine was dropped, not kept alive
    turns = [Message("user" if i % 2 == 0 else "assistant", f"message number {i} " * 6) for i in range(21)]
    whole = engines.chat_engine("pld", whole_prompt=True).fit(turns, None, 16)
    assert whole.left_out == 0 and list(whole.ids) == build_prompt_ids(tokenizer, turns)
