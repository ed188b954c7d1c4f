"""The llama.cpp path with its layers where the build and the settings put them: where the layers went, the kernel
verdict of that placement and what it promises, rollback and a GGUF draft on the same device, and a stop.

`make test` runs these on the CPU build, where nothing is offloaded (placed_native_pair: the embedded model where the
build and the settings put it). `make test-offload` runs them (`-m offload`) on llama.cpp built for Vulkan, with
every layer on Mesa's software Vulkan device (lavapipe): SPECCHAT_GPU_LAYERS=-1, GGML_VK_VISIBLE_DEVICES=0, and
SPECCHAT_EXPECT_OFFLOAD=Vulkan, which makes the first test insist that llama.cpp really put the layers there.
lavapipe decodes about 2 tokens a second, so the replies are short."""

import json
import os
import threading

import pytest
import torch

from specchat.engine.backends.draft_backends import LlamaCppDraftBackend
from specchat.engine.backends.llamacpp.kernels import default_cache_file, verdict_key
from specchat.engine.backends.llamacpp.library import gpu_layers_for
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.divergence import divergence_margin
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import PromptLookupDrafter, make_drafter
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.models.sources import ModelSource, embedded_model_file

pytestmark = [pytest.mark.model, pytest.mark.offload]

EXPECTED = os.environ.get("SPECCHAT_EXPECT_OFFLOAD", "")  # the backend every layer must be on ("Vulkan"), or ""
NEAR_TIE = 1.0  # logits: where "same distribution" kernels may part from plain decoding (test_llama_kernels.py)
REPLY = 12  # tokens a reply: a few seconds each on lavapipe
TOKENS = [100 + (7919 * i) % 40000 for i in range(40)]


@pytest.fixture(scope="module")
def gguf_draft(placed_native_pair):
    """The embedded file loaded again through the loader as a GGUF draft: its own model and contexts, placed by the
    same rules as the target's."""
    return load_model(ModelSource.parse(str(embedded_model_file())), LoadOptions(backend="llama.cpp"))


def prompt(pair, text):
    return build_prompt_ids(pair.target.tokenizer, [Message("user", text)])


def test_the_layers_are_where_the_build_and_the_settings_put_them(placed_native_pair, gguf_draft):
    native = placed_native_pair.target.native
    placement, layers = native.placement, int(native.llama.llama_model_n_layer(native.handle)) + 1
    print(f"\ntarget: {placed_native_pair.target.runs_on}; draft: {gguf_draft.runs_on}")
    if EXPECTED:
        assert native.llama.llama_supports_gpu_offload()
        assert placement.offloaded and placement.backend == EXPECTED, placement
        assert placement.layers == placement.of_layers == layers  # every layer, the output head too
        assert f"{placement.device}, {layers}/{layers} layers" in placed_native_pair.target.runs_on
    elif not native.llama.llama_supports_gpu_offload():  # the CPU build: nothing can be offloaded
        assert not placement.offloaded and placement.describe() == "CPU"
        assert placed_native_pair.target.runs_on.startswith("llama.cpp, CPU, ")
    assert gguf_draft.native.placement == placement  # the draft is placed by the same rules
    assert gpu_layers_for(native.path, device="cpu") == (0, "")  # the CPU setting keeps every layer there


def test_the_kernel_verdict_is_kept_for_this_placement(placed_native_pair):
    native = placed_native_pair.target.native
    _, placement_key = gpu_layers_for(native.path)
    assert bool(placement_key) == native.placement.offloaded
    kept = json.loads(default_cache_file().read_text(encoding="utf-8"))
    verdict = kept[verdict_key(native.path, native.kernels.repack, placement_key)]
    print(f"\nverdict on {native.placement.describe()}: {verdict}, replies {native.kernels.exactness}")
    if native.kernels.exactness == "bit-identical":
        assert native.kernels.max_pass_rows == verdict["exact_rows"]


def test_replies_on_the_device_keep_the_verdicts_promise_with_a_gguf_draft_there_too(placed_native_pair, gguf_draft):
    target = placed_native_pair.target
    ids = prompt(placed_native_pair, "Repeat exactly: red, green, blue, red, green, blue, red, green, blue.")
    config = GenerationConfig(max_new_tokens=REPLY, k=3, adaptive_k=False)
    eos = target.eos_token_ids()
    plain = SpeculativeEngine(target.native.runner(), target.tokenizer, eos_token_ids=eos).generate(ids, config)
    assert len(plain.token_ids) == REPLY
    tokenizers = (target.tokenizer, target.tokenizer)
    model_drafter = make_drafter("model", draft_model=gguf_draft.native, tokenizers=tokenizers)
    assert isinstance(model_drafter._backend, LlamaCppDraftBackend)
    for drafter in (PromptLookupDrafter(), model_drafter):
        drafted = SpeculativeEngine(target.native.runner(), target.tokenizer, drafter, eos_token_ids=eos)
        reply = drafted.generate(ids, config)
        assert reply.stats.draft_proposed > 0  # the drafts were really verified in passes of several rows
        if target.native.kernels.exactness == "bit-identical":
            assert reply.token_ids == plain.token_ids
        else:  # the fastest kernels: the same distribution, parting from plain decoding only at a near tie
            margin = divergence_margin(target.native.runner(), ids, list(plain.token_ids), list(reply.token_ids))
            assert margin is None or margin < NEAR_TIE, margin
    assert reply.stats.draft_accepted > 0  # the target's own file as its draft: accepted


def test_rollback_on_the_device_gives_the_logits_of_a_fresh_run(gguf_draft):
    backend = LlamaCppDraftBackend(gguf_draft.native)
    backend.reset()
    backend.forward(TOKENS[:24])
    for token in TOKENS[24:28]:
        backend.forward([token])  # four drafted tokens
    backend.crop(26)  # two of them accepted
    assert backend.length == 26
    after = backend.forward([7, 8, 9])
    fresh = LlamaCppDraftBackend(gguf_draft.native)  # the same passes without the rejected ones
    fresh.reset()
    fresh.forward(TOKENS[:24])
    fresh.forward([TOKENS[24]]), fresh.forward([TOKENS[25]])
    expected = fresh.forward([7, 8, 9])
    if gguf_draft.native.kernels.exactness == "bit-identical":
        assert torch.equal(after, expected)
    else:  # rows of passes of other sizes round otherwise: close, the same choice unless two tokens nearly tie
        assert torch.allclose(after, expected, atol=NEAR_TIE)
        top = torch.topk(expected, 2).values
        assert int(after.argmax()) == int(expected.argmax()) or float(top[0] - top[1]) < NEAR_TIE


def test_a_stop_ends_a_reply_on_the_device_and_the_next_reply_is_whole(placed_native_pair):
    ids = prompt(placed_native_pair, "Count from one to twenty.")
    config = GenerationConfig(max_new_tokens=REPLY, k=3, adaptive_k=False)
    engine = placed_native_pair.engine("pld")
    cancel = threading.Event()
    events = []
    for event in engine.stream(ids, config, cancel):
        events.append(event)
        cancel.set()  # Stop, as soon as the first tokens arrive
    stopped = events[-1].result
    assert stopped.finish_reason == "cancelled" and 0 < len(stopped.token_ids) < REPLY
    whole = engine.generate(ids, config)  # the same engine and contexts, rolled back for the next reply
    assert whole.finish_reason == "length" and len(whole.token_ids) == REPLY
    began = list(whole.token_ids[:len(stopped.token_ids)])
    if placed_native_pair.target.native.kernels.exactness == "bit-identical":
        assert began == list(stopped.token_ids)
    else:  # the next prefill reuses the stopped one's positions: rows of other pass sizes, the same distribution
        margin = divergence_margin(placed_native_pair.target.native.runner(), ids, began, list(stopped.token_ids))
        assert margin is None or margin < NEAR_TIE, margin
