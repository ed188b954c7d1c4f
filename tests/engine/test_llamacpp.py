"""The llama.cpp target runner on the real embedded GGUF file: bit-identity across row counts, lossless greedy and
sampled verification, the hidden states a draft head reads, and the messages when llama-cpp-python is missing."""

from typing import Sequence

import pytest
import torch
from test_sampling import chi_square_p, lossy_verify

from specchat.core.errors import ModelLoadError, SpecchatError
from specchat.engine.backends.llamacpp import library
from specchat.engine.backends.llamacpp import llama_runner as llamacpp
from specchat.engine.backends.llamacpp import prompt_reader
from specchat.engine.backends.llamacpp.cache_types import BF16, F16
from specchat.engine.backends.llamacpp.governor import ThreadGovernor
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.sampling import Sampler, SamplingParams, verify_stochastic
from specchat.engine.decoding.speculative import GenerationConfig

pytestmark = pytest.mark.model

QUESTIONS = ["What is the capital of France? Answer in one sentence.",
             "Repeat exactly: The library opens at nine and closes at six; loans last three weeks."]


def prompt(pair, text):
    return build_prompt_ids(pair.target.tokenizer, [Message("user", text)])


def test_the_default_gguf_backend_on_the_cpu_is_llama_cpp(native_pair):
    from specchat.engine.loading.load import LoadOptions, runs_on_llama_cpp
    from specchat.models.sources import ModelSource

    assert native_pair.target.backend == "llama.cpp" and native_pair.target.model is None  # no float copy loaded
    assert runs_on_llama_cpp(ModelSource.parse("embedded"), LoadOptions(device="cpu"))
    assert not runs_on_llama_cpp(ModelSource.parse("embedded"), LoadOptions(device="cpu", backend="torch"))


LONG = [100 + (7919 * i) % 40000 for i in range(600)]  # past the 512 positions where flash decoding would start


def batch_invariant(runner, tokens: Sequence[int], sizes: Sequence[int] = range(2, 10),
                    prefix: int = 8) -> bool:
    """Every position of `tokens` after `prefix` gives bit for bit the same logits in one-token passes, in passes of
    each size in `sizes`, and (the prefix's last position) in one prefill or in two chunks."""
    cache = runner.new_cache(len(tokens) + 1)
    whole = runner.forward(torch.tensor([tokens[:prefix]]), cache, keep=1)
    one_by_one = [runner.forward(torch.tensor([[t]]), cache, keep=1)[0] for t in tokens[prefix:]]
    runner.rollback(cache, prefix // 2)
    if not torch.equal(runner.forward(torch.tensor([tokens[prefix // 2:prefix]]), cache, keep=1), whole):
        print("llama.cpp gives a prompt's last position other logits when the prompt is fed in chunks")
        return False
    for size in sizes:
        runner.rollback(cache, prefix)
        start = 0
        while start + size <= len(one_by_one):
            rows = runner.forward(torch.tensor([tokens[prefix + start: prefix + start + size]]), cache, keep=size)
            if not all(torch.equal(rows[i], one_by_one[start + i]) for i in range(size)):
                print("llama.cpp passes of %d tokens differ from one-token passes", size)
                return False
            start += size
        runner.rollback(cache, prefix)  # the partial tail was never fed
    return True



def test_every_row_of_a_pass_is_bit_identical_to_one_token_passes(native_pair):
    runner = native_pair.target.native.runner()
    sizes = range(2, 18)  # every pass a verification of K = 1..16 makes, over one reading of each prompt
    assert batch_invariant(runner, prompt(native_pair, QUESTIONS[1]), sizes)
    assert batch_invariant(runner, LONG, sizes, prefix=560)  # a long context, a prefill of 280 + 280
    verdict = native_pair.target.native.kernel_verdict()  # the embedded Q4_1 file: no kernel switches at all
    assert verdict.exact_rows == 16 and verdict.chunked_prefill
    assert native_pair.target.native.kernels.exactness == "bit-identical" and native_pair.target.exactness == "bit-identical"


@pytest.mark.parametrize("kv_types, flash, prefix", [((BF16, F16), 0, 96), ((F16, F16), 1, 560)])
def test_the_check_catches_settings_whose_rows_depend_on_the_batch(native_pair, monkeypatch, kv_types, flash, prefix):
    # Without flash attention the attention's products differ between one row and several, at any length; with a
    # float16 K and V, one-token passes over 512+ positions split them between threads and prefills of 64+ tokens
    # are tiled (the runner's bfloat16 K keeps both off).
    monkeypatch.setattr(native_pair.target.native.llama, "LLAMA_FLASH_ATTN_TYPE_ENABLED", flash)
    monkeypatch.setattr(llamacpp, "decoding_types", lambda offloaded: kv_types)
    runner = native_pair.target.native.runner()
    assert not batch_invariant(runner, LONG[:prefix + 40], range(4, 6), prefix=prefix)


@pytest.mark.parametrize("question", QUESTIONS)
def test_greedy_outputs_are_identical_across_drafters_on_llama_cpp(native_pair, question):
    ids = prompt(native_pair, question)
    config = GenerationConfig(max_new_tokens=40, k=4, adaptive_k=False)
    plain = native_pair.engine("none").generate(ids, config)
    assert plain.text.strip()
    for drafter in ("pld", "model", "hybrid", "eagle", "eagle-hybrid"):
        drafted = native_pair.engine(drafter).generate(ids, config)
        assert drafted.token_ids == plain.token_ids, drafter
        assert drafted.stats.draft_proposed > 0, drafter  # the drafts really were verified in batches


def test_the_runner_keeps_the_final_norm_states_the_head_reads(native_pair):
    native = native_pair.target.native
    runner = native.runner(keeps_features=True)
    ids = prompt(native_pair, QUESTIONS[0])
    cache = runner.new_cache(len(ids) + 8)
    logits = runner.forward(torch.tensor([ids]), cache, keep=3, prefill=True)
    assert runner.features.shape == (3, native.hidden_size)
    # The output head applied to the kept states gives the pass's logits (llama.cpp multiplies by its 8-bit blocks
    # on 8-bit activations, so closely rather than exactly).
    head_logits = native.embeddings().get_output_embeddings()(runner.features)
    assert torch.equal(head_logits.argmax(-1), logits.argmax(-1))
    assert torch.allclose(head_logits, logits, atol=0.5)


def short_passes(monkeypatch) -> list[int]:
    """Passes of at most 64 tokens (MAX_BATCH, read when a runner and its context are made) and a prompt of 100: the
    two passes of a long prefill, as the 600 tokens of LONG take at 512, for a sixth of the work."""
    monkeypatch.setattr(llamacpp, "MAX_BATCH", 64)
    monkeypatch.setattr(prompt_reader, "CHUNK", 64)
    return LONG[:100]


def test_a_prefill_that_keeps_states_gives_the_same_rows_as_one_that_does_not(native_pair, monkeypatch):
    """The positions that need no output run with embeddings off (else llama.cpp computes the output head at all of
    them): logits and states of the kept rows must not change for it."""
    long = short_passes(monkeypatch)
    native = native_pair.target.native
    plain, keeping = native.runner(), native.runner(keeps_features=True)
    whole = [], []
    for runner, out in ((plain, whole[0]), (keeping, whole[1])):
        cache = runner.new_cache(len(long) + 8)
        out.append(runner.forward(torch.tensor([long]), cache, keep=2, prefill=True))
    assert torch.equal(whole[0][0], whole[1][0])
    states = keeping.features
    cache = keeping.new_cache(len(long) + 8)  # the same prompt token by token at the end: the same last states
    keeping.forward(torch.tensor([long[:-2]]), cache, keep=1)  # on the decoding context, as above
    keeping.forward(torch.tensor([long[-2:]]), cache, keep=2)
    assert torch.equal(keeping.features, states)


def test_sampled_verification_on_llama_cpp_logits_reproduces_the_target_and_a_wrong_rule_is_caught(native_pair):
    """The acceptance rule over the real model's verification pass: the first emitted token follows p_1 whatever
    the draft proposed."""
    runner = native_pair.target.native.runner()
    ids = prompt(native_pair, "Name a colour.")
    cache = runner.new_cache(len(ids) + 8)
    first = int(runner.forward(torch.tensor([ids]), cache, keep=1, prefill=True)[0].argmax())
    alone = runner.forward(torch.tensor([[first]]), cache, keep=1)
    runner.rollback(cache, len(ids))
    draft = [int(alone[0].argmax())]  # the likeliest token: a wrong rule on rejection shows up most there
    logits = runner.forward(torch.tensor([[first, *draft]]), cache, keep=len(draft) + 1)
    assert torch.equal(logits[0], alone[0])
    sampler = Sampler(SamplingParams(temperature=1.0), seed=0, device=torch.device("cpu"))
    p = sampler.probs(logits)
    top = torch.topk(p[0], 12)
    expected = {int(t): float(v) for t, v in zip(top.indices, top.values)}
    expected[-1] = 1.0 - sum(expected.values())  # every other token in one cell
    runs = 4000

    def histogram(rule) -> dict:
        counts: dict = {}
        for _ in range(runs):
            n, token = rule(p, draft, None, sampler)
            emitted = draft[0] if n > 0 else token
            cell = emitted if emitted in expected else -1
            counts[cell] = counts.get(cell, 0) + 1
        return counts

    # 8000 draws over the vocabulary on one torch thread: a second gains nothing there, and where another process
    # takes a core, waiting for it makes every draw several times slower. Restored for llama.cpp's passes after.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert chi_square_p(histogram(verify_stochastic), expected, runs) > 1e-3
        assert chi_square_p(histogram(lossy_verify), expected, runs) < 1e-6
    finally:
        torch.set_num_threads(threads)


def test_missing_llama_cpp_gives_clear_messages_and_a_fallback(monkeypatch):
    from specchat import bench
    from specchat.engine.loading.load import LoadOptions, runs_on_llama_cpp
    from specchat.models.sources import ModelSource

    monkeypatch.setattr(library, "llama_cpp_available", lambda: False)
    with pytest.raises(SpecchatError, match="llama-cpp-python"):
        bench.parse_modes("none,llama-cpp", has_draft=False)
    with pytest.raises(ModelLoadError, match="pip install"):
        runs_on_llama_cpp(ModelSource.parse("embedded"), LoadOptions(device="cpu", backend="llama.cpp"))
    assert not runs_on_llama_cpp(ModelSource.parse("embedded"), LoadOptions(device="cpu"))  # auto: the torch path


def test_the_peer_mode_runs_llama_cpp_python_beside_ours_with_the_same_reply(native_pair):
    from specchat import bench

    runner = bench.BenchRunner(native_pair, bench.BenchSettings(max_new_tokens=24))
    prompts = [bench.BenchPrompt(1, "qa", (QUESTIONS[0],))]
    records = runner.run(prompts, bench.parse_modes("none,llama-cpp,llama-cpp-pld", has_draft=False))
    by_mode = {r.mode: r for r in records}
    assert by_mode["llama-cpp"].new_tokens > 0 and by_mode["llama-cpp"].identical
    assert by_mode["llama-cpp-pld"].identical
    assert bench.bench_run_values(by_mode["llama-cpp"], native_pair, runner.settings, None) is None


def test_a_prefill_reuses_the_previous_generations_prefix_with_the_same_reply(native_pair):
    document = "Loans last three weeks and may be renewed twice unless another reader has asked for the book. " * 24
    first = prompt(native_pair, document + QUESTIONS[0])
    follow_up = build_prompt_ids(native_pair.target.tokenizer, [
        Message("user", document + QUESTIONS[0]), Message("assistant", "Paris."), Message("user", "And of Italy?")])
    config = GenerationConfig(max_new_tokens=24)
    engine = native_pair.engine("pld")
    engine.generate(first, config)
    reused = engine.generate(follow_up, config)
    # the first turn's whole passes were kept (prompt_reader.py: never a position that a decoding pass made)
    shared = prompt_reader.common_prefix(first[:-1], follow_up, len(follow_up))
    turn_ends = native_pair.target.native.turn_end_ids
    assert engine.runner.reused_tokens >= prompt_reader.whole_passes(follow_up, shared, turn_ends) > 0
    fresh = native_pair.engine("none").generate(follow_up, config)
    assert reused.token_ids == fresh.token_ids


def test_the_thread_count_does_not_change_a_pass(native_pair):
    """The governor may switch a context to one thread mid-reply; that must not change any logits."""
    runner = native_pair.target.native.runner()
    ids = LONG
    cache = runner.new_cache(len(ids) + 8)
    full = runner.forward(torch.tensor([ids]), cache, keep=6)
    runner.rollback(cache, 0)
    runner.llama.llama_set_n_threads(runner._ctx, 1, 1)
    single = runner.forward(torch.tensor([ids]), cache, keep=6)
    assert torch.equal(full, single)


def test_the_governor_drops_to_one_thread_under_contention_and_returns():
    governor = ThreadGovernor(threads=2)
    for _ in range(5):
        governor.observe(1, governor.threads_for_next_pass(), 0.005)
    governor.observe(1, governor.threads_for_next_pass(), 0.300)  # a collapsed pass: another process took a core
    assert [governor.threads_for_next_pass() for _ in range(governor.COOLDOWN)] == [1] * governor.COOLDOWN
    assert governor.threads_for_next_pass() == 2  # tried again
    governor.observe(1, 2, 0.250)  # still contended: a longer rest
    assert governor.cooldown == 4 * governor.COOLDOWN
    rest = 2 * governor.COOLDOWN  # 3 * COOLDOWN passes at one thread in all
    assert [governor.threads_for_next_pass() for _ in range(rest)] == [1] * rest
    governor.observe(1, governor.threads_for_next_pass(), 0.0052)  # fast again
    assert governor.cooldown == governor.COOLDOWN and governor.threads_for_next_pass() == 2


def test_a_stop_is_heard_between_the_passes_of_a_long_prefill(native_pair, monkeypatch):
    import threading

    from specchat.core.errors import PrefillCancelled

    long = short_passes(monkeypatch)
    runner = native_pair.target.native.runner()
    cancel = threading.Event()
    cancel.set()
    cache = runner.new_cache(len(long) + 8)
    with pytest.raises(PrefillCancelled):  # 100 tokens: two passes of at most CHUNK, stopped after the first
        runner.forward(torch.tensor([long]), cache, keep=1, prefill=True, cancel=cancel)
    assert cache.length == 0  # nothing reached the decoding context
    fresh = runner.new_cache(len(long) + 8)  # the next request reuses what was read and gives the same logits
    reused = runner.forward(torch.tensor([long]), fresh, keep=1, prefill=True)
    assert runner.reused_tokens == prompt_reader.CHUNK == 64 and fresh.length == len(long)
    whole = native_pair.target.native.runner()
    assert torch.equal(reused, whole.forward(torch.tensor([long]), whole.new_cache(len(long) + 8), keep=1,
                                             prefill=True))
