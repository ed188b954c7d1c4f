"""A GGUF target's embeddings and output head for a draft head, read by tensor_bytes (gguf_header.py) rather than
gguf-py's reader: the same values as gguf-py's quantizer wrote, tied or separate heads, and a damaged or hostile
file refused with a message naming it."""

import numpy as np
import pytest
import torch

from specchat.core.errors import ModelLoadError
from specchat.engine.backends.llamacpp.target_embeddings import TargetEmbeddings

gguf = pytest.importorskip("gguf")
VOCAB, HIDDEN = 64, 32


def write_gguf(path, tensors: dict, alignment: int | None = None):
    """A GGUF file with a vocabulary of strings in its header (what the reader must skip) and `tensors`: name ->
    (float32 [VOCAB, HIDDEN] values, ggml type)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    writer.add_token_list([f"token-{i}" for i in range(VOCAB)])
    for name, (values, kind) in tensors.items():
        data = gguf.quants.quantize(values, kind)
        writer.add_tensor(name, data, raw_shape=data.shape if kind == gguf.GGMLQuantizationType.F32 else None,
                          raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((VOCAB, HIDDEN)).astype(np.float32)


@pytest.mark.parametrize("kind", ["F32", "F16", "Q8_0"])
def test_the_embeddings_and_a_separate_head_read_back_as_their_type_holds_them(tmp_path, kind):
    kind = gguf.GGMLQuantizationType[kind]
    embeddings, head = values(1), values(2)
    path = tmp_path / "m.gguf"
    write_gguf(path, {"token_embd.weight": (embeddings, kind), "output.weight": (head, kind)}, alignment=64)
    read = TargetEmbeddings.from_gguf(path)
    expected = [gguf.quants.dequantize(gguf.quants.quantize(v, kind), kind) for v in (embeddings, head)]
    assert torch.equal(read.embed_tokens.weight, torch.from_numpy(expected[0].astype(np.float32)))
    assert torch.equal(read.lm_head.weight, torch.from_numpy(expected[1].astype(np.float32)))
    assert read.lm_head.weight.shape == (VOCAB, HIDDEN)


def test_a_tied_head_is_the_embeddings(tmp_path):
    path = tmp_path / "tied.gguf"
    write_gguf(path, {"token_embd.weight": (values(3), gguf.GGMLQuantizationType.F32)})
    read = TargetEmbeddings.from_gguf(path)
    assert read.lm_head.weight is read.embed_tokens.weight
    assert torch.equal(read.embed_tokens.weight, torch.from_numpy(values(3)))


def test_a_damaged_or_hostile_file_is_refused_with_its_name(tmp_path):
    good = tmp_path / "good.gguf"
    write_gguf(good, {"token_embd.weight": (values(4), gguf.GGMLQuantizationType.F32)})
    data = good.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])  # the tensor's bytes end early
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:200])  # inside the vocabulary
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_bytes(b"hello" * 100)
    no_embeddings = tmp_path / "none.gguf"
    write_gguf(no_embeddings, {"blk.0.weight": (values(5), gguf.GGMLQuantizationType.F32)})
    for path, words in [(cut, "past the end"), (header_only, "could not read"), (not_gguf, "not a GGUF"),
                        (no_embeddings, "no token embeddings")]:
        with pytest.raises(ModelLoadError, match=words) as caught:
            TargetEmbeddings.from_gguf(path)
        assert path.name in str(caught.value)
