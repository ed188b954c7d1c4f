"""llama.cpp's kernels and what a reply promises: every common GGUF quantization stays on llama.cpp, the measured
cap keeps verification bit-identical, the verdict is kept per file, and on the fastest kernels every divergence
from plain decoding sits at a near-tie (a test that a wrong acceptance rule fails)."""

import ctypes

import pytest
import torch

from specchat.engine.backends.llamacpp import kernels as llama_kernels
from specchat.engine.backends.llamacpp.kernels import KernelVerdict, choose, verdicts_for
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.divergence import PlainReference, divergence_margins
from specchat.engine.decoding.speculative import GenerationConfig

QUANTS = {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "Q8_0": 7, "Q4_0": 2, "IQ4_XS": 30}  # llama_ftype values


def test_choose_prefers_the_longest_exact_pass_and_falls_back_only_on_auto():
    verdicts = {True: KernelVerdict(3, False), False: KernelVerdict(7, True)}
    chosen = choose(verdicts, "bit-identical")
    assert (chosen.repack, chosen.exactness, chosen.max_pass_rows, chosen.reuse_prefix) == (
        False, "bit-identical", 7, True)
    # auto: bit-identity only where llama.cpp's default layout has it at every size, for free
    assert choose(verdicts, "auto").exactness == "distribution" and choose(verdicts, "auto").max_pass_rows is None
    free = choose({True: KernelVerdict(16, True)}, "auto")
    assert (free.repack, free.exactness, free.max_pass_rows) == (True, "bit-identical", 16)
    assert choose({True: KernelVerdict(16, False)}, "auto").exactness == "distribution"
    tie = choose({True: KernelVerdict(7, True), False: KernelVerdict(7, True)}, "bit-identical")
    assert tie.repack and tie.max_pass_rows == 7  # llama.cpp's default layout wins a tie
    narrow = {True: KernelVerdict(1, True), False: KernelVerdict(2, True)}
    forced = choose(narrow, "bit-identical")  # asked for: kept, with drafting down to K = 1
    assert forced.exactness == "bit-identical" and forced.max_pass_rows == 2
    assert choose({}, "distribution").max_pass_rows is None
    with pytest.raises(ValueError, match="exactness"):
        choose(verdicts, "exact-ish")


def test_verdicts_are_measured_once_per_file_and_a_damaged_cache_is_measured_again(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    cache = tmp_path / "kernels.json"
    calls = []

    def measure(repack):
        calls.append(repack)
        return KernelVerdict(3 if repack else 7, True)

    first = verdicts_for(model, measure, cache_file=cache)
    assert calls == [True, False] and first[False].exact_rows == 7
    assert verdicts_for(model, measure, cache_file=cache) == first and calls == [True, False]  # from the cache
    cache.write_text("{not json", encoding="utf-8")
    assert verdicts_for(model, measure, cache_file=cache) == first and len(calls) == 4
    model.write_bytes(b"GGUF" + bytes(61))  # another file at the same path: measured again
    verdicts_for(model, measure, cache_file=cache)
    assert len(calls) == 6


def test_a_setting_exact_at_every_size_is_not_compared_with_the_other(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    calls = []
    verdicts_for(model, lambda r: calls.append(r) or KernelVerdict(16, True), cache_file=tmp_path / "k.json")
    assert calls == [True]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The embedded model requantized to each common type with llama.cpp's own quantizer (under a second each;
    IQ4_XS is kept to two layers, as its search is slow)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make setup)")
    from specchat.models.sources import embedded_model_file

    folder = tmp_path_factory.mktemp("quants")
    files = {}
    for name, ftype in QUANTS.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.allow_requantize, params.nthread = ftype, True, 2
        if name == "IQ4_XS":
            prune = (ctypes.c_int32 * 29)(*range(2, 30), -1)
            params.prune_layers = ctypes.cast(prune, ctypes.POINTER(ctypes.c_int32))
        out = folder / f"smollm2-{name}.gguf"
        assert llama_cpp.llama_model_quantize(str(embedded_model_file()).encode(), str(out).encode(),
                                              ctypes.byref(params)) == 0
        files[name] = out
    return files


@pytest.mark.model
@pytest.mark.parametrize("quant", list(QUANTS))
def test_every_common_quantization_stays_on_llama_cpp_with_a_cap_that_holds(quantized, quant, tmp_path, monkeypatch):
    from specchat.engine.backends.llamacpp.llama_runner import load_with_exactness
    from specchat.engine.loading.load import LoadOptions, runs_on_llama_cpp
    from specchat.models.sources import ModelSource

    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(llama_kernels, "CHECK_PREFIX", 96)  # the attention path past 512 is the embedded test's
    source = ModelSource.parse(str(quantized[quant]))
    assert source.kind == "gguf" and runs_on_llama_cpp(source, LoadOptions(device="cpu"))
    native = load_with_exactness(quantized[quant], wanted="bit-identical")
    rows = native.kernels.max_pass_rows
    assert native.kernels.exactness == "bit-identical" and rows >= 3, native.kernels
    # The cap holds: a pass of `rows` tokens gives the rows of one-token passes, bit for bit.
    verdict = llama_kernels.measure_verdict(native.runner(), prefix=96)
    assert verdict.exact_rows == rows
    native.close()


NEAR_TIE = 1.0  # logits: above the largest deviation between llama.cpp's kernel paths measured in this test


@pytest.mark.model
def test_on_the_fastest_kernels_divergences_sit_at_near_ties_and_a_wrong_rule_is_caught(quantized, monkeypatch):
    """Q4_K_M with repacking, no cap: passes of 4+ rows take another kernel (up to ~0.5 logit apart). The exact
    rule then may part from plain decoding only where plain's top two nearly tie; a rule that also accepts the
    target's second choice parts where the margin is large. Eight prompts: a reply's first parting under the wrong
    rule may itself come at a small margin (on three prompts it did, once the decoding cache's V became float16);
    over eight the wrong rule parts at margins of 1.1 and 6.5, the right one below 0.26."""
    from specchat.engine.backends.llamacpp.kernels import KernelChoice
    from specchat.engine.backends.llamacpp.llama_runner import LlamaCppModel
    from specchat.engine.decoding import speculative
    from specchat.engine.drafting import PromptLookupDrafter
    from specchat.engine.loading.load import load_tokenizer
    from specchat.models.sources import ModelSource

    kernels = KernelChoice(repack=True, exactness="distribution", max_pass_rows=None, reuse_prefix=False)
    native = LlamaCppModel(quantized["Q4_K_M"], kernels=kernels)
    tokenizer = load_tokenizer(ModelSource.parse("embedded"))  # the same vocabulary as the requantized file
    texts = ["Repeat exactly: the quick brown fox jumps over the lazy dog, then the lazy dog sleeps all day.",
             "Copy this list: apples, pears, plums, cherries, apples, pears, plums, cherries, apples, pears.",
             "Write the numbers from one to twenty in words, separated by commas.",
             "Repeat this sentence three times: my sister keeps bees on the roof of an old mill by the river.",
             "Copy this exactly: red, green, blue, red, green, blue, red, green, blue, red, green, blue.",
             "Repeat exactly: one small step for a man, one giant leap for mankind, one small step again.",
             "Write the days of the week, then write them again in reverse order.",
             "Spell the word banana letter by letter, three times."]
    prompts = [build_prompt_ids(tokenizer, [Message("user", t)]) for t in texts]
    config = GenerationConfig(max_new_tokens=40, k=8, adaptive_k=False)
    eos = {native.eos_token_id}

    def drafting():
        return speculative.SpeculativeEngine(native.runner(), tokenizer, PromptLookupDrafter(), eos_token_ids=eos)

    # Plain decoding takes no draft, so neither rule changes its replies: computed once, for both, by hand (as
    # plain decoding runs, the engine's own plain reply checked against it).
    plain = PlainReference(native.runner(), config.max_new_tokens, eos)
    engine_plain = speculative.SpeculativeEngine(native.runner(), tokenizer, None, eos_token_ids=eos)
    assert list(engine_plain.generate(prompts[0], config).token_ids) == plain.reply(prompts[0])
    drafted = drafting()
    identical, margins = divergence_margins(plain, drafted, prompts, config)
    assert all(m < NEAR_TIE for m in margins), margins
    assert drafted.generate(prompts[0], config).stats.draft_accepted > 0  # the drafts were really verified

    def top2_rule(logits, draft):  # wrong: a draft token among the target's two likeliest is taken
        n = 0
        for i, token in enumerate(draft):
            if token not in torch.topk(logits[i], 2).indices.tolist():
                break
            n += 1
        return n, int(torch.argmax(logits[n]))

    monkeypatch.setattr(speculative, "verify_greedy", top2_rule)
    _, wrong = divergence_margins(plain, drafting(), prompts, config)
    assert any(m >= NEAR_TIE for m in wrong), wrong
    native.close()


def test_the_engine_keeps_every_verification_within_the_runners_cap(target, tokenizer):
    from specchat.engine.backends.torch.runners import runner_for
    from specchat.engine.decoding.speculative import SpeculativeEngine
    from specchat.engine.drafting import PromptLookupDrafter

    runner = runner_for(target)
    runner.max_pass_rows = 3
    engine = SpeculativeEngine(runner, tokenizer, PromptLookupDrafter())
    plain = SpeculativeEngine(runner_for(target), tokenizer)
    ids = tokenizer.encode("ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab")
    config = GenerationConfig(max_new_tokens=30, k=8, adaptive_k=False)
    result = engine.generate(ids, config)
    assert result.token_ids == plain.generate(ids, config).token_ids
    assert len(result.stats.steps_by_k) <= 3  # K of 0, 1 or 2: passes of at most 3 rows
