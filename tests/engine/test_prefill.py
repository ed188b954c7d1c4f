"""The prompt's prefill in chunks: the same logits and hidden states as one pass, lossless replies for every kind of
drafter, and a Stop heard between chunks (a long prompt no longer holds the model thread until it is read)."""

import threading

import pytest
import torch

from specchat.core.errors import PrefillCancelled
from specchat.engine.backends.torch import runners
from specchat.engine.backends.torch.runners import TorchRunner, runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import NoDrafter, PromptLookupDrafter, make_drafter
from specchat.engine.drafting.eagle_network import HeadShape
from specchat.training.eagle_head import build_attending_head, build_head

CHUNK = 16  # the tiny models' window is 512 positions: small chunks, so that their prompts take several


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(runners, "PREFILL_CHUNK", CHUNK)


@pytest.fixture(scope="module")
def long_prompt(tokenizer):
    text = "The quick brown fox jumps over the lazy dog; the dog sleeps on. " * 3
    ids = tokenizer(text)["input_ids"]
    assert len(ids) > 4 * CHUNK + 3  # several chunks, and a last one of another length
    return ids


@pytest.fixture(scope="module")
def attending_head(target):
    vocab = target.get_input_embeddings().weight.shape[0]
    head = build_head(target, torch.arange(vocab), HeadShape(hidden=target.config.hidden_size, inner=32, blocks=2,
                                                             vocab=vocab), seed=0)
    shape = HeadShape(hidden=head.shape.hidden, inner=32, blocks=2, vocab=vocab, heads=4, kv_heads=2, head_dim=8,
                      rope_theta=10000.0)
    attending = build_attending_head(head, shape, seed=1)
    with torch.no_grad():
        torch.nn.init.normal_(attending.o.weight, std=0.3)
    return attending.eval()


@pytest.mark.parametrize("lean", [True, False])
def test_chunked_prefill_gives_the_logits_and_hidden_states_of_one_pass(target, long_prompt, monkeypatch, lean):
    ids = torch.tensor([long_prompt])
    whole = runner_for(target, keeps_features=True, lean=lean)
    with torch.inference_mode():
        expected = whole.forward(ids, whole.new_cache(len(long_prompt) + 8), keep=1, prefill=True,
                                 hidden_rows=len(long_prompt))
        expected_features = whole.features
        monkeypatch.setattr(runners, "PREFILL_CHUNK", CHUNK)
        chunked = runner_for(target, keeps_features=True, lean=lean)
        got = chunked.forward(ids, chunked.new_cache(len(long_prompt) + 8), keep=1, prefill=True,
                              hidden_rows=len(long_prompt))
    assert chunked.features.shape == expected_features.shape == (len(long_prompt), target.config.hidden_size)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(chunked.features, expected_features, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["pld", "model", "eagle"])
def test_replies_after_a_chunked_prefill_are_lossless(target, tokenizer, close_draft, long_prompt, attending_head,
                                                      small_chunks, kind):
    config = GenerationConfig(max_new_tokens=40, k=4, adaptive_k=False)
    reference = SpeculativeEngine(target, tokenizer, NoDrafter()).generate(long_prompt, config)
    drafter = {"pld": lambda: PromptLookupDrafter(),
               "model": lambda: make_drafter("model", draft_model=close_draft),
               "eagle": lambda: make_drafter("eagle", head=attending_head, target=target)}[kind]()
    result = SpeculativeEngine(target, tokenizer, drafter).generate(long_prompt, config)
    assert result.token_ids == reference.token_ids


class CountingRunner(TorchRunner):
    """Sets the cancel event from another thread once the first chunk of the prefill has run."""

    def __init__(self, target, cancel):
        super().__init__(target)
        self.cancel_event, self.chunks = cancel, 0
        self._prefill_forward = self._counting(self._prefill_forward)

    def _counting(self, forward):
        def counted(*args, **kwargs):
            self.chunks += 1
            if self.chunks == 1:
                setter = threading.Thread(target=self.cancel_event.set)  # the user presses Stop meanwhile
                setter.start()
                setter.join()
            return forward(*args, **kwargs)
        return counted


def test_a_stop_during_the_prefill_ends_the_reply_before_the_prompt_is_read(target, tokenizer, long_prompt,
                                                                            small_chunks):
    cancel = threading.Event()
    runner = CountingRunner(target, cancel)
    events = list(SpeculativeEngine(runner, tokenizer, NoDrafter()).stream(long_prompt, GenerationConfig(), cancel))
    assert runner.chunks == 1  # the second chunk never ran
    (event,) = events
    assert event.result.finish_reason == "cancelled" and event.result.token_ids == () and event.result.text == ""
    # the same engine and runner answer the next request in full
    cancel.clear()
    runner.chunks = 2  # no more cancelling
    again = SpeculativeEngine(runner, tokenizer, NoDrafter()).generate(long_prompt, GenerationConfig(max_new_tokens=8))
    assert len(again.token_ids) == 8


def test_the_runner_reports_a_cancel_between_chunks(target, long_prompt, small_chunks):
    cancel = threading.Event()
    cancel.set()
    runner = runner_for(target)
    with pytest.raises(PrefillCancelled):
        runner.forward(torch.tensor([long_prompt]), runner.new_cache(len(long_prompt)), keep=1, prefill=True,
                       cancel=cancel)
    short = long_prompt[:CHUNK]  # one chunk: nothing to stop between, the pass runs
    assert runner.forward(torch.tensor([short]), runner.new_cache(CHUNK), keep=1, prefill=True,
                          cancel=cancel).shape[0] == 1
