"""The EAGLE-style draft heads (stateless, and attending with its own KV cache): lossless drafting from the target's
hidden states, the states they are handed, the attending head's cache after rollbacks, and the file format."""

import pytest
import torch

from specchat.core.errors import IncompatibleDraftError, ModelLoadError
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import EagleDrafter, NoDrafter, make_drafter
from specchat.engine.drafting.eagle_network import HeadShape, load_head, save_head
from specchat.training.eagle_head import build_attending_head, build_head


@pytest.fixture(scope="module")
def head(target):
    vocab = target.get_input_embeddings().weight.shape[0]
    shape = HeadShape(hidden=target.config.hidden_size, inner=32, blocks=2, vocab=vocab // 2)
    return build_head(target, torch.arange(0, vocab, 2), shape, seed=0).eval()


@pytest.fixture(scope="module")
def attending_head(target, head):
    shape = HeadShape(hidden=head.shape.hidden, inner=32, blocks=2, vocab=head.shape.vocab, heads=4, kv_heads=2,
                      head_dim=8, rope_theta=10000.0)
    attending = build_attending_head(head, shape, seed=1)
    with torch.no_grad():  # not the zero start: the attention block must change what is drafted
        torch.nn.init.normal_(attending.o.weight, std=0.3)
    return attending.eval()


@pytest.fixture(scope="module", params=["stateless", "attending"])
def any_head(request, head, attending_head):
    return head if request.param == "stateless" else attending_head


@pytest.mark.parametrize("kind", ["eagle", "eagle-hybrid"])
@pytest.mark.parametrize("k,adaptive", [(1, False), (4, False), (3, True)])
def test_greedy_output_is_identical_to_plain_decoding(target, tokenizer, prompt_ids, any_head, kind, k, adaptive):
    config = GenerationConfig(max_new_tokens=48, k=k, adaptive_k=adaptive)
    reference = SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt_ids, config)
    engine = SpeculativeEngine(target, tokenizer, make_drafter(kind, head=any_head, target=target))
    result = engine.generate(prompt_ids, config)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_proposed > 0


def test_the_attending_head_starts_as_the_stateless_one(target, head):
    shape = HeadShape(hidden=head.shape.hidden, inner=32, blocks=2, vocab=head.shape.vocab, heads=4, kv_heads=2)
    attending = build_attending_head(head, shape, seed=1).eval()
    features, tokens = torch.randn(5, head.shape.hidden), torch.randn(5, head.shape.hidden)
    with torch.no_grad():
        torch.testing.assert_close(attending.extend(features, tokens, attending.new_cache(2)), head(features, tokens))


class CacheCheckingDrafter(EagleDrafter):
    """Records, at every proposal, the context and the head's cached keys of the verified positions."""

    def __init__(self, head, target):
        super().__init__(head, target)
        self.seen = []

    def propose(self, context, k):
        draft = super().propose(context, k)
        keys = self._cache.keys[0, :, : self._verified_length].clone()
        self.seen.append((list(context), keys))
        return draft


@pytest.mark.parametrize("kind", ["eagle", "eagle-hybrid"])
def test_the_attending_heads_cache_holds_only_positions_computed_from_the_targets_states(
        target, tokenizer, prompt_ids, attending_head, kind):
    """After drafts are rejected (and, with the hybrid, after steps drafted by lookup), the cache must equal the
    head run afresh over the target's own hidden states of the whole context: position p from (f_p, x_{p+1})."""
    drafter = CacheCheckingDrafter(attending_head, target)
    drafting = drafter
    if kind == "eagle-hybrid":
        from specchat.engine.drafting import LookupHybrid, PromptLookupDrafter

        drafting = LookupHybrid(PromptLookupDrafter(), drafter, name="eagle-hybrid")
    result = SpeculativeEngine(target, tokenizer, drafting).generate(
        prompt_ids, GenerationConfig(max_new_tokens=40, k=3, adaptive_k=False))  # fixed K: not the clock's choice
    assert result.stats.rejected_steps > 0 and len(drafter.seen) > 3
    for context, keys in drafter.seen:
        assert keys.shape[1] == len(context) - 1  # every verified position, none drafted
        with torch.no_grad():
            states = target.get_decoder()(input_ids=torch.tensor([context[:-1]])).last_hidden_state[0]
            fresh = attending_head.new_cache(len(context))
            attending_head.extend(states, target.get_input_embeddings().weight[context[1:]], fresh)
        torch.testing.assert_close(keys, fresh.keys[0, :, : len(context) - 1], atol=1e-4, rtol=1e-4)


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


def test_a_sampled_draft_puts_no_mass_outside_the_heads_vocabulary(target, tokenizer, prompt_ids, any_head):
    from specchat.engine.decoding.sampling import SamplingParams

    head = any_head
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


def test_a_saved_head_loads_back_the_same_and_is_checked_against_its_target(tmp_path, target, any_head,
                                                                            unrelated_draft):
    head = any_head
    save_head(head, tmp_path / "head", {"note": "test"})
    loaded = load_head(tmp_path / "head", target)
    assert loaded.shape == head.shape
    assert torch.equal(loaded.vocab_ids, head.vocab_ids)
    features = torch.randn(3, target.config.hidden_size)
    tokens = torch.randn(3, target.config.hidden_size)
    with torch.no_grad():
        if head.shape.attends:
            expected, got = head.extend(features, tokens, head.new_cache()), loaded.extend(features, tokens,
                                                                                         loaded.new_cache())
        else:
            expected, got = head(features, tokens), loaded(features, tokens)
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)  # float16 file
    with pytest.raises(IncompatibleDraftError, match="hidden states of size"):
        load_head(tmp_path / "head", unrelated_draft)
    with pytest.raises(ModelLoadError, match="cannot read the draft head"):
        load_head(tmp_path, target)
