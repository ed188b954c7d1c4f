"""The EAGLE-style draft head: lossless drafting from the target's hidden states, the states it is handed, and
its file format."""

import pytest
import torch

from specchat.engine import GenerationConfig, NoDrafter, SpeculativeEngine
from specchat.engine.drafters import make_drafter
from specchat.engine.eagle import EagleDrafter, HeadShape, load_head, save_head
from specchat.engine.errors import IncompatibleDraftError, ModelLoadError
from specchat.training.eagle import build_head


@pytest.fixture(scope="module")
def head(target):
    vocab = target.get_input_embeddings().weight.shape[0]
    shape = HeadShape(hidden=target.config.hidden_size, inner=32, blocks=2, vocab=vocab // 2)
    return build_head(target, torch.arange(0, vocab, 2), shape, seed=0).eval()


@pytest.mark.parametrize("kind", ["eagle", "eagle-hybrid"])
@pytest.mark.parametrize("k,adaptive", [(1, False), (4, False), (3, True)])
def test_greedy_output_is_identical_to_plain_decoding(target, tokenizer, prompt_ids, head, kind, k, adaptive):
    config = GenerationConfig(max_new_tokens=48, k=k, adaptive_k=adaptive)
    reference = SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt_ids, config)
    engine = SpeculativeEngine(target, tokenizer, make_drafter(kind, head=head, target=target))
    result = engine.generate(prompt_ids, config)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_proposed > 0


class RecordingDrafter(EagleDrafter):
    def __init__(self, head, target):
        super().__init__(head, target)
        self.seen = []

    def propose(self, context, k):
        self.seen.append((list(context), self._feature.clone()))
        return super().propose(context, k)


def test_the_head_reads_the_hidden_state_that_produced_the_newest_token(target, tokenizer, prompt_ids, head):
    drafter = RecordingDrafter(head, target)
    SpeculativeEngine(target, tokenizer, drafter).generate(prompt_ids, GenerationConfig(max_new_tokens=30, k=3,
                                                                                        adaptive_k=False))
    assert len(drafter.seen) > 3
    for context, feature in drafter.seen:
        with torch.no_grad():
            hidden = target.get_decoder()(input_ids=torch.tensor([context[:-1]])).last_hidden_state[0, -1]
        torch.testing.assert_close(feature, hidden, atol=1e-4, rtol=1e-4)


def test_a_sampled_draft_puts_no_mass_outside_the_heads_vocabulary(target, tokenizer, prompt_ids, head):
    from specchat.engine import SamplingParams

    drafter = EagleDrafter(head, target)
    engine = SpeculativeEngine(target, tokenizer, drafter)
    proposals = []
    original = drafter.propose
    drafter.propose = lambda context, k: proposals.append(original(context, k)) or proposals[-1]
    engine.generate(prompt_ids, GenerationConfig(max_new_tokens=20, k=3, adaptive_k=False, seed=1,
                                                 sampling=SamplingParams(temperature=1.0)))
    q = torch.cat([p.probs for p in proposals if p is not None])
    outside = torch.ones(q.shape[-1], dtype=torch.bool)
    outside[head.vocab_ids] = False
    assert float(q[:, outside].sum()) == 0.0
    torch.testing.assert_close(q.sum(-1), torch.ones(len(q)))
    assert all(int(t) in set(head.vocab_ids.tolist()) for p in proposals if p for t in p.tokens)


def test_a_saved_head_loads_back_the_same_and_is_checked_against_its_target(tmp_path, target, head,
                                                                            unrelated_draft):
    save_head(head, tmp_path / "head", {"note": "test"})
    loaded = load_head(tmp_path / "head", target)
    assert torch.equal(loaded.vocab_ids, head.vocab_ids)
    features = torch.randn(2, target.config.hidden_size)
    tokens = torch.randn(2, target.config.hidden_size)
    torch.testing.assert_close(loaded(features, tokens), head(features, tokens), atol=2e-3, rtol=2e-3)  # float16 file
    with pytest.raises(IncompatibleDraftError, match="hidden states of size"):
        load_head(tmp_path / "head", unrelated_draft)
    with pytest.raises(ModelLoadError, match="cannot read the draft head"):
        load_head(tmp_path, target)
