"""Model sources, loading from local folders and files, and the draft compatibility check."""

import pytest
import torch

from specchat.core.errors import IncompatibleDraftError, ModelLoadError
from specchat.engine.loading.compat import check_pair
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.engine.loading.pair import check_sources, load_pair
from specchat.models.sources import ModelSource


def test_parse_sources(tmp_path):
    assert ModelSource.parse(None).kind == "embedded"
    assert ModelSource.parse("embedded").kind == "embedded"
    assert ModelSource.parse("HuggingFaceTB/SmolLM2-360M-Instruct") == ModelSource("hub", "HuggingFaceTB/SmolLM2-360M-Instruct")
    assert ModelSource.parse("hf:org/name").location == "org/name"
    assert ModelSource.parse(str(tmp_path)).kind == "folder"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    assert ModelSource.parse(str(gguf)) == ModelSource("gguf", str(gguf))
    with pytest.raises(ModelLoadError, match="no model at"):
        ModelSource.parse("./missing/model")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        ModelSource.parse(str(tmp_path / "notes.txt"))


def test_load_a_local_folder(model_folders, target, prompt_ids):
    loaded = load_model(ModelSource.parse(str(model_folders / "target")), LoadOptions(device="cpu"))
    assert loaded.device.type == "cpu" and loaded.dtype == torch.float32
    with torch.no_grad():
        ids = torch.tensor([prompt_ids])
        assert torch.allclose(loaded.model(ids).logits, target(ids).logits, atol=1e-5)


def test_a_draft_folder_may_name_the_tokens_it_proposes_from(tmp_path, target, tokenizer):
    import json

    from specchat.engine.loading.load import PROPOSAL_VOCABULARY

    target.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    source = ModelSource.parse(str(tmp_path))
    assert load_model(source, LoadOptions(device="cpu")).proposal_vocab is None
    (tmp_path / PROPOSAL_VOCABULARY).write_text(json.dumps({"token_ids": [0, 3, 7]}))
    assert load_model(source, LoadOptions(device="cpu")).proposal_vocab.tolist() == [0, 3, 7]
    for bad in ({"token_ids": [0, 10**6]}, {"ids": [1]}, []):
        (tmp_path / PROPOSAL_VOCABULARY).write_text(json.dumps(bad))
        with pytest.raises(ModelLoadError, match=PROPOSAL_VOCABULARY):
            load_model(source, LoadOptions(device="cpu"))


def test_pickle_weights_are_refused_unless_allowed(tmp_path, target, tokenizer):
    target.save_pretrained(tmp_path, safe_serialization=False)
    for weights in tmp_path.glob("*.safetensors"):
        weights.unlink()
    tokenizer.save_pretrained(tmp_path)
    if not list(tmp_path.glob("*.bin")):  # this transformers only writes safetensors: make the pickle file ourselves
        torch.save(target.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="pickle"):
        load_model(ModelSource.parse(str(tmp_path)), LoadOptions(device="cpu"))


def test_corrupt_gguf_gives_a_clear_error(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="could not load"):
        load_model(ModelSource.parse(str(broken)), LoadOptions(device="cpu"))


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(ModelSource.parse(str(tmp_path)))


def test_unavailable_device():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelLoadError, match="CUDA"):
        load_model(ModelSource.parse("embedded"), LoadOptions(device="cuda"))


def test_compatible_pair(model_folders):
    report = check_sources(ModelSource.parse(str(model_folders / "target")), ModelSource.parse(str(model_folders / "draft")))
    assert report.compatible, report.reasons
    pair = load_pair(ModelSource.parse(str(model_folders / "target")), ModelSource.parse(str(model_folders / "draft")),
                     LoadOptions(device="cpu"))
    assert pair.draft is not None and pair.engine("model").drafter.name == "model"


def test_another_tokenizer_drafts_through_text(tmp_path, model_folders, unrelated_draft):
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer(vocab_size=300)
    other.save_pretrained(tmp_path)
    unrelated_draft.save_pretrained(tmp_path)
    target_source = ModelSource.parse(str(model_folders / "target"))
    report = check_sources(target_source, ModelSource.parse(str(tmp_path)))
    assert report.compatible and report.through_text
    assert "vocabulary sizes differ: target 320 tokens, draft 300" in report.summary()
    assert "different texts" in report.summary()
    pair = load_pair(target_source, ModelSource.parse(str(tmp_path)), LoadOptions(device="cpu"))
    assert pair.engine("model").drafter.name == "universal"


def test_incompatible_pair_says_why(tmp_path, model_folders, unrelated_draft):
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer()
    other.eos_token = "<|endoftext|>"
    other.save_pretrained(tmp_path)
    unrelated_draft.save_pretrained(tmp_path)
    target_source = ModelSource.parse(str(model_folders / "target"))
    report = check_sources(target_source, ModelSource.parse(str(tmp_path)))
    assert report.reasons == ["eos token differs: target 2, draft 0"] and not report.compatible
    with pytest.raises(IncompatibleDraftError, match="cannot draft"):
        load_pair(target_source, ModelSource.parse(str(tmp_path)))


def test_special_token_mismatch(tokenizer):
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer()
    other.eos_token = "<|endoftext|>"
    report = check_pair(tokenizer, other)
    assert report.reasons == ["eos token differs: target 2, draft 0"]
