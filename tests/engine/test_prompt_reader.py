"""The prompt reader (engine/backends/llamacpp/prompt_reader.py): a float16 context reads the prompt at llama.cpp's
speed, and its KV entries move to the bfloat16 decoding context. Checked on the real embedded GGUF file: a reused
prefix gives bit for bit what a fresh read gives, replies stay bit-identical across drafters, and the conversion of
the cache state is exact."""

import struct

import numpy as np
import pytest
import torch
from runner_reads import read_then_decode

from specchat.engine.backends.llamacpp import prompt_reader
from specchat.engine.backends.llamacpp.cache_types import BF16, F16, READ_TYPE, decoding_types
from specchat.engine.backends.llamacpp.prompt_reader import StateFormatError, as_decoding_state
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig


def fake_state(values: np.ndarray, cells: int, layers: int, kind: int = READ_TYPE, v_trans: int = 0) -> bytearray:
    """A sequence state laid out as llama.cpp's KV cache writes one: `values` float16, cells x row per layer; with
    v_trans, each V layer as a context without flash attention writes it (the cells of each element in turn)."""
    per_layer = values.reshape(2 * layers, -1)
    row = per_layer.shape[1] * 2 // cells
    head = struct.pack("<IiI", 0x67676D6C, 0, 1) + struct.pack("<I", cells)
    head += b"".join(struct.pack("<iIi", position, 1, 0) for position in range(cells))
    head += struct.pack("<II", v_trans, layers)
    blocks = []
    for number, block in enumerate(per_layer):
        if v_trans and number >= layers:
            blocks.append(struct.pack("<iII", kind, 2, row // 2) + block.reshape(cells, -1).T.copy().tobytes())
        else:
            blocks.append(struct.pack("<iQ", kind, row) + block.tobytes())
    return bytearray(head + b"".join(blocks))


def reference_bfloat16(values: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16 on float16 values widened to float32: round to nearest, ties to even."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("types", [(BF16, BF16), (BF16, F16)])
def test_a_float16_state_becomes_the_decoding_state_ggml_would_round_to(types):
    """K and, where the decoding cache's V is bfloat16 (layers offloaded), V too are rounded to nearest even; a
    float16 V (on the CPU: decoding_types) keeps its bits."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 3, 2 * 2 * 5 * 6 - 6),
                             [0.0, -0.0, 65504.0, 1e-7, np.inf, -np.inf]]).astype(np.float16)
    state = fake_state(values, cells=5, layers=2)
    as_decoding_state(state, types)
    offset = 12 + 4 + 5 * 12 + 8
    rounded = reference_bfloat16(values).reshape(4, -1)
    for number, (block, kept) in enumerate(zip(rounded, values.view(np.uint16).reshape(4, -1))):
        kind, row = struct.unpack_from("<iQ", state, offset)
        target = types[number >= 2]
        assert kind == target and row == block.size * 2 // 5
        offset += 12
        assert np.array_equal(np.frombuffer(state, np.uint16, block.size, offset), block if target == BF16 else kept)
        offset += block.size * 2
    assert offset == len(state)


def test_the_decoding_cache_has_a_bfloat16_k_and_on_the_cpu_a_float16_v():
    assert decoding_types(offloaded=False) == (BF16, F16) and decoding_types(offloaded=True) == (BF16, BF16)


@pytest.mark.parametrize("types", [(BF16, BF16), (BF16, F16)])
def test_a_transposed_v_becomes_the_rows_a_flash_attention_cache_holds(types):
    # a reader without flash attention keeps V transposed: the decoding state is the one a flash-attention reader
    # of the same values gives, V in rows and v_trans 0
    values = np.random.default_rng(1).normal(0, 2, 2 * 3 * 7 * 8).astype(np.float16)
    transposed, rows = fake_state(values, cells=7, layers=3, v_trans=1), fake_state(values, cells=7, layers=3)
    assert transposed != rows
    as_decoding_state(transposed, types)
    as_decoding_state(rows, types)
    assert transposed == rows


@pytest.mark.parametrize("change, why", [({"kind": 30}, "type 30")])
def test_a_state_of_another_layout_is_refused_not_misread(change, why):
    state = fake_state(np.zeros(2 * 3 * 4, np.float16), cells=3, layers=1, **change)
    with pytest.raises(StateFormatError, match=why):
        as_decoding_state(state, (BF16, F16))
    with pytest.raises(StateFormatError):
        as_decoding_state(fake_state(np.zeros(2 * 3 * 4, np.float16), cells=3, layers=1)[:-2], (BF16, F16))


LONG = [100 + (7919 * i) % 40000 for i in range(600)]


@pytest.mark.model
def test_a_reused_prefix_gives_bit_for_bit_what_a_fresh_read_gives(native_pair, monkeypatch):
    monkeypatch.setattr(prompt_reader, "CHUNK", 64)  # contexts and readers made from here on read in passes of 64
    native = native_pair.target.native
    used, fresh = native.runner(), native.runner()

    _, reply = read_then_decode(used, LONG[:150], steps=6)
    follow_up = LONG[:150] + reply + LONG[300:340]  # the reply's positions were decoded: they are read again
    reused = read_then_decode(used, follow_up)
    assert used.reused_tokens == 128  # the first turn's whole chunks
    again = read_then_decode(fresh, follow_up)
    assert fresh.reused_tokens == 0
    assert torch.equal(reused[0], again[0]) and reused[1] == again[1]


@pytest.mark.model
def test_the_reader_reads_the_prompt_the_decoding_context_would(native_pair):
    """Other kernels and a float16 cache round otherwise, but never so far as to change what the model says."""
    native = native_pair.target.native
    tokens = build_prompt_ids(native_pair.target.tokenizer, [Message("user", "Name three rivers of Europe.")])
    runner = native.runner()
    read = runner.forward(torch.tensor([tokens]), runner.new_cache(len(tokens) + 1), keep=1, prefill=True)
    runner.uses_reader = False  # the old way: the prompt through the decoding context
    here = runner.forward(torch.tensor([tokens]), runner.new_cache(len(tokens) + 1), keep=1, prefill=True)
    assert int(read.argmax()) == int(here.argmax())
    assert torch.corrcoef(torch.stack([read[0], here[0]]))[0, 1] > 0.999


@pytest.mark.model
def test_replies_stay_bit_identical_across_drafters_after_a_long_read(native_pair):
    document = "Loans last three weeks and may be renewed twice unless another reader has asked for the book. " * 30
    ids = build_prompt_ids(native_pair.target.tokenizer, [Message("user", document + "Repeat the rule once.")])
    config = GenerationConfig(max_new_tokens=32)
    plain = native_pair.engine("none").generate(ids, config)
    lookup = native_pair.engine("pld").generate(ids, config)
    assert len(ids) > 2 * prompt_reader.CHUNK and plain.token_ids == lookup.token_ids


@pytest.mark.model
def test_the_first_token_comes_from_the_readers_pass_and_the_state_moves_before_the_next(native_pair):
    """The prompt's last token is read by the reader too: its logits give the first token, and the KV entries move
    into the decoding context only before its next pass. What the user gets is what the reader's fresh read and a
    decoding loop give, however the move was put off."""
    native = native_pair.target.native
    first, reply = read_then_decode(native.runner(), LONG[:100])

    runner = native.runner()
    cache = runner.new_cache(120)
    logits = runner.forward(torch.tensor([LONG[:100]]), cache, keep=1, prefill=True)
    assert runner._pending is not None  # nothing moved yet: the first token waited for no state
    assert torch.equal(logits, first)
    out = [int(logits[0].argmax())]
    for _ in range(len(reply) - 1):
        out.append(int(runner.forward(torch.tensor([[out[-1]]]), cache, keep=1)[0].argmax()))
    assert runner._pending is None and out == reply


@pytest.mark.model
def test_a_move_put_off_past_a_read_ahead_reads_the_prompt_again_as_it_was(native_pair):
    """A reply that ends at its first token leaves its state unmoved; the reader may then read ahead (another
    thread, in the idle time) and change what it holds. The next pass takes the state from a read of the same
    passes, so it still gives a fresh run's numbers."""
    native = native_pair.target.native
    _, reply = read_then_decode(native.runner(), LONG[:100])

    runner = native.runner()
    read_then_decode(runner, LONG[400:450], steps=1)  # a first prompt: the reader's state layout is checked
    cache = runner.new_cache(120)
    out = [int(runner.forward(torch.tensor([LONG[:100]]), cache, keep=1, prefill=True)[0].argmax())]
    assert runner._pending.raw is None  # the state is not even copied yet
    runner._reader.read(LONG[:100] + LONG[300:340])  # what a read ahead does to the reader
    for _ in range(len(reply) - 1):
        out.append(int(runner.forward(torch.tensor([[out[-1]]]), cache, keep=1)[0].argmax()))
    assert out == reply


@pytest.mark.model
def test_a_prompt_after_an_unmoved_one_and_a_grown_context_reads_as_a_fresh_one(native_pair):
    native = native_pair.target.native
    follow_up = LONG[:100] + LONG[300:340]
    first, reply = read_then_decode(native.runner(), follow_up)

    runner = native.runner()
    runner.forward(torch.tensor([LONG[:100]]), runner.new_cache(101), keep=1, prefill=True)  # a one-token reply
    again = read_then_decode(runner, follow_up)  # the same context
    assert torch.equal(again[0], first) and again[1] == reply
    runner.forward(torch.tensor([LONG[:100]]), runner.new_cache(101), keep=1, prefill=True)
    held = runner._n_ctx
    runner.new_cache(held + 1)  # a context made anew, for more positions, before the state moved
    assert runner._n_ctx > held
    grown = read_then_decode(runner, follow_up)
    assert torch.equal(grown[0], first) and grown[1] == reply


@pytest.mark.model
def test_a_runner_that_keeps_hidden_states_gets_the_same_first_token_and_its_state(native_pair):
    """A drafter that reads the target's hidden states (a draft head) gets the prompt's last one from the reader's
    pass too, so its replies start as plain decoding's do."""
    native = native_pair.target.native
    tokens = LONG[:300]
    plain = read_then_decode(native.runner(), tokens)
    reading = native.runner(keeps_features=True)
    assert read_then_decode(reading, tokens)[1] == plain[1]
    cache = reading.new_cache(len(tokens) + 1)
    logits = reading.forward(torch.tensor([tokens]), cache, keep=1, prefill=True)
    assert torch.equal(logits, plain[0]) and reading.features.shape == (1, native.hidden_size)
    from_reader = reading.features.clone()
    reading.uses_reader = False  # the old way: the last token's state from a decoding pass
    reading.forward(torch.tensor([tokens]), reading.new_cache(len(tokens) + 1), keep=1, prefill=True)
    assert torch.corrcoef(torch.stack([from_reader[0], reading.features[-1]]))[0, 1] > 0.999
