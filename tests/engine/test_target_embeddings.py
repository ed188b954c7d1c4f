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


def hand_made(path, fields: bytes, n_fields: int, tensors: bytes = b"", n_tensors: int = 0) -> None:
    """A GGUF v3 file of raw header bytes: what a hostile file can say that gguf-py's writer never writes."""
    import struct

    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_fields) + fields + tensors + b"\0" * 64)


def test_hostile_headers_are_refused_without_filling_memory_or_the_stack(tmp_path):
    import struct

    def key(name: str) -> bytes:
        return struct.pack("<Q", len(name)) + name.encode()

    nested = key("x") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 5000 + struct.pack("<IQ", 4, 0)
    huge_alignment = key("general.alignment") + struct.pack("<IIQ", 9, 4, 1 << 40)  # an array, 2^40 values
    long_name = struct.pack("<Q", 1 << 40)  # a key said to be a terabyte long
    embd = key("token_embd.weight")
    overflow = embd + struct.pack("<I", 3) + struct.pack("<QQQ", 4, 1 << 32, 1 << 32) + struct.pack("<IQ", 0, 0)
    empty = embd + struct.pack("<I", 2) + struct.pack("<QQ", 4, 0) + struct.pack("<IQ", 0, 0)
    cases = {"nested.gguf": (nested, 1, b"", 0), "alignment.gguf": (huge_alignment, 1, b"", 0),
             "name.gguf": (long_name, 1, b"", 0), "overflow.gguf": (b"", 0, overflow, 1),
             "empty.gguf": (b"", 0, empty, 1)}
    for name, (fields, n_fields, tensors, n_tensors) in cases.items():
        path = tmp_path / name
        hand_made(path, fields, n_fields, tensors, n_tensors)
        with pytest.raises(ModelLoadError) as caught:
            TargetEmbeddings.from_gguf(path)
        assert path.name in str(caught.value) and not str(caught.value).endswith(": "), caught.value
