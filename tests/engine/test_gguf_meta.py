"""A GGUF file's tokenizer and config converted once and kept: the same tokenizer as transformers' own conversion,
read from the cache on the next load, a damaged cache converted again, and the shipped copy of the embedded
model's tokenizer equal to the one in its file."""

import pytest

from specchat.engine.loading import gguf_meta
from specchat.models.sources import embedded_model_file, shipped_draft_folder

TEXTS = ["Hello, world!", "  def f(x):\n\treturn x ** 2  # héllo 世界", "<|im_start|>user\nhi<|im_end|>"]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3 + 3?"}]


def same_tokenizer(a, b) -> bool:
    return (all(a.encode(t) == b.encode(t) for t in TEXTS) and a.get_vocab() == b.get_vocab()
            and a.all_special_ids == b.all_special_ids and a.eos_token_id == b.eos_token_id
            and a.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
            == b.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True))


@pytest.fixture(scope="module")
def converted():
    """transformers' own conversion of the embedded GGUF file (seconds: the reason for the cache)."""
    from transformers import AutoTokenizer

    path = embedded_model_file()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.model
def test_the_shipped_tokenizer_is_the_embedded_files_own(converted):
    from transformers import PreTrainedTokenizerFast

    assert same_tokenizer(PreTrainedTokenizerFast.from_pretrained(str(shipped_draft_folder())), converted)


@pytest.mark.model
def test_a_converted_tokenizer_is_kept_read_back_and_converted_again_when_damaged(converted, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    path = embedded_model_file()
    first = gguf_meta.gguf_tokenizer(path)
    assert same_tokenizer(first, converted)
    kept = next(tmp_path.glob("gguf-metadata/*/tokenizer"))
    assert (kept / "complete").is_file() and (kept / "tokenizer.json").is_file()
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    conversions = []
    real = gguf_meta._keep
    monkeypatch.setattr(gguf_meta, "_keep", lambda *a: conversions.append(a) or real(*a))
    assert same_tokenizer(gguf_meta.gguf_tokenizer(path), converted) and conversions == []  # read from the cache
    (kept / "tokenizer.json").write_text("{damaged", encoding="utf-8")
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    assert same_tokenizer(gguf_meta.gguf_tokenizer(path), converted) and len(conversions) == 1
    assert gguf_meta.gguf_tokenizer(path) is gguf_meta.gguf_tokenizer(path)  # once per process


@pytest.mark.model
def test_the_config_is_kept_too(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    config = gguf_meta.gguf_config(embedded_model_file())
    assert config.model_type == "llama" and config.hidden_size == 576
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    again = gguf_meta.gguf_config(embedded_model_file())
    drop = lambda c: {k: v for k, v in c.to_dict().items() if k != "_name_or_path"}  # noqa: E731 - where it was read
    assert drop(again) == drop(config)
