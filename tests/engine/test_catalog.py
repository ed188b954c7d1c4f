"""The model catalog: the shipped file validates, parameters and memory follow from the configs (checked against
the real shipped weights and published counts), compatibility is explained, a bad file gets a clear error, and
`specchat models catalog` prints the table and JSON. Fast: no network, no model loads."""

import json
import struct

import pytest

from specchat.cli import main
from specchat.models.catalog import entries as cat
from specchat.models.catalog.entries import CatalogError, parse_catalog

SMOLLM2_135M = "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_the_shipped_catalog_validates(catalog):
    assert len(catalog.entries) >= 20 and catalog.revision >= 1
    families = {entry.family for entry in catalog.entries}
    assert {"SmolLM2", "Qwen2.5", "Llama 3", "Gemma 3"} <= families
    for target in catalog.targets():
        for draft in catalog.drafts_for(target):
            assert draft.is_draft and cat.compatibility(target, draft).compatible
    embedded = catalog.get("embedded")
    assert embedded.id == SMOLLM2_135M and embedded.is_draft and embedded.is_target
    assert catalog.get("HuggingFaceTB/SmolLM2-1.7B-Instruct").drafts[0] == SMOLLM2_135M
    assert [d.id for d in catalog.drafts_for(catalog.get("Qwen/Qwen2.5-7B-Instruct"))] == [
        "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"]


def test_parameters_of_the_embedded_model_match_its_weights(catalog):
    """The embedded GGUF file's tensors, counted element by element, and its architecture metadata."""
    gguf = pytest.importorskip("gguf")
    from specchat.core.errors import ModelLoadError
    from specchat.models.sources import embedded_model_file

    try:
        path = embedded_model_file()
    except ModelLoadError as error:
        pytest.skip(str(error))
    reader = gguf.GGUFReader(str(path))
    counted = sum(int(t.n_elements) for t in reader.tensors)
    entry = catalog.get(SMOLLM2_135M)
    assert cat.parameter_count(entry) == counted == 134_515_008

    def field(name):
        part = reader.fields[f"llama.{name}"]
        return int(part.parts[part.data[0]][0])

    shape = entry.shape
    assert (field("embedding_length"), field("feed_forward_length"), field("block_count"),
            field("attention.head_count"), field("attention.head_count_kv"), field("vocab_size"),
            field("context_length")) == (shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers,
                                         shape.num_attention_heads, shape.num_key_value_heads, shape.vocab_size,
                                         shape.max_position_embeddings)
    assert not any(t.name == "output.weight" for t in reader.tensors) and shape.tie_word_embeddings


def test_parameters_of_the_shipped_draft_match_its_weights(catalog):
    from specchat.models.sources import shipped_draft_folder

    folder = shipped_draft_folder()
    data = (folder / "model.safetensors").read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    counted = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            size = 1
            for dim in tensor["shape"]:
                size *= dim
            counted += size
    entry = catalog.get("embedded-draft")
    assert cat.parameter_count(entry) == counted
    config = json.loads((folder / "config.json").read_text())
    assert {k: v for k, v in config.items() if k in cat.CONFIG_FIELDS and k != "torch_dtype"} == {
        k: v for k, v in vars(entry.shape).items() if k in config and k != "torch_dtype"}


@pytest.mark.parametrize("model_id, published", [
    ("HuggingFaceTB/SmolLM2-360M-Instruct", 361_821_120),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", 1_711_376_384),
    ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),  # q, k, v biases, tied
    ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),  # untied
    ("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400),
    ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
    ("google/gemma-3-1b-it", 999_885_952),  # four norms a layer, q and k norms
    ("google/gemma-3-4b-it", 4_300_079_472),  # with its SigLIP vision tower and projector
])
def test_parameters_match_the_published_counts(catalog, model_id, published):
    """The totals the Hub reports from each checkpoint's safetensors files."""
    assert cat.parameter_count(catalog.get(model_id)) == published


def _entry(**config):
    base = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "tie_word_embeddings": True,
            "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
    return cat.CatalogEntry(id="test/tiny", name="tiny", family="test", roles=("target",), licence="mit",
                            gated=False, tokenizer="t", shape=cat.ModelShape(**{**base, **config}))


def test_parameter_and_memory_math():
    tiny = _entry()
    # embeddings 100x64; a layer: q, o 64x64, k, v 64x32 (2 kv heads of 16), MLP 3x64x128, 2 norms; final norm
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert cat.parameter_count(tiny) == 100 * 64 + 2 * layer + 64
    untied = _entry(tie_word_embeddings=False)
    assert cat.parameter_count(untied) - cat.parameter_count(tiny) == 100 * 64
    params = cat.parameter_count(tiny)
    assert cat.weights_bytes(tiny, "fp32") == 4 * params
    assert cat.weights_bytes(tiny, "bf16") == cat.weights_bytes(tiny, "fp16") == 2 * params
    assert cat.weights_bytes(tiny, "q8_0") == round(params * 8.5 / 8)
    assert cat.weights_bytes(tiny, "q4") == round(params * 4.5 / 8)
    assert cat.weights_bytes(tiny, "bfloat16") == cat.download_bytes(tiny)
    # K and V, 2 kv heads of 16, 2 layers, 4 bytes at fp32 and 2 at bf16
    assert cat.kv_cache_bytes(tiny, 1000, "fp32") == 2 * 2 * 16 * 2 * 4 * 1000
    assert cat.kv_bytes_per_1k(tiny, "bf16") == 2 * 2 * 16 * 2 * 2 * 1000
    with pytest.raises(CatalogError, match="unknown weight format"):
        cat.weights_bytes(tiny, "int3")


def test_sliding_window_layers_stop_growing(catalog):
    gemma = catalog.get("google/gemma-3-1b-it")  # 26 layers, every 6th global: 4 global, 22 local of 512 tokens
    per_layer_token = 2 * 1 * 256 * 2
    assert cat.kv_cache_bytes(gemma, 400, "bf16") == 26 * 400 * per_layer_token
    assert cat.kv_cache_bytes(gemma, 4096, "bf16") == (4 * 4096 + 22 * 512) * per_layer_token
    assert cat.kv_bytes_per_1k(gemma, "bf16") == 4 * 1000 * per_layer_token


def test_fits_in_memory_verdicts():
    tiny = _entry()
    needed = cat.memory_needed(tiny, "fp32")
    assert needed == cat.weights_bytes(tiny, "fp32") + cat.kv_cache_bytes(tiny, 2048, "fp32") + cat.RUNTIME_BYTES
    assert cat.fits_in_memory(tiny, "fp32", 2 * needed).verdict == "fits"
    assert cat.fits_in_memory(tiny, "fp32", needed).verdict == "tight"
    assert cat.fits_in_memory(tiny, "fp32", needed - 1).verdict == "too big"
    unknown = cat.fits_in_memory(tiny, "fp32", None)
    assert unknown.verdict == "unknown" and "unknown" in unknown.explain()
    assert "too big" in cat.fits_in_memory(tiny, "bf16", 1).explain()
    assert cat.available_memory_bytes() is None or cat.available_memory_bytes() > 0


def test_compatibility_is_explained(catalog):
    qwen7, qwen05 = catalog.get("Qwen/Qwen2.5-7B-Instruct"), catalog.get("Qwen/Qwen2.5-0.5B-Instruct")
    same = cat.compatibility(qwen7, qwen05)
    assert same.compatible and "same tokenizer" in same.explanation and "lossless" in same.explanation
    assert "padded differently" in same.explanation
    llama1 = catalog.get("meta-llama/Llama-3.2-1B-Instruct")
    different = cat.compatibility(qwen7, llama1)
    assert different.compatible  # through text: universal drafting
    assert "different tokenizers" in different.explanation and "through text" in different.explanation
    bigger = cat.compatibility(catalog.get("HuggingFaceTB/SmolLM2-360M-Instruct"),
                               catalog.get("HuggingFaceTB/SmolLM2-1.7B-Instruct"))
    assert bigger.compatible and "not smaller" in bigger.explanation
    assert "drafting for itself" in cat.compatibility(qwen7, qwen7).explanation
    assert [e.id for e in catalog.search("GEMMA-3-1b")] == ["google/gemma-3-1b-it"]


def _mutated(document, change):
    document = json.loads(json.dumps(document))
    change(document)
    return json.dumps(document)


def _model(document, model_id):
    return next(m for m in document["models"] if m["id"] == model_id)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["models"][0]["config"].pop("hidden_size"),
     f"model 1 ({SMOLLM2_135M}) config: missing field 'hidden_size'"),
    (lambda d: d["models"][0]["config"].update(hidden_size="576"), "hidden_size must be a whole number, got \"576\""),
    (lambda d: d["models"][0]["config"].update(hiden_size=576), "unknown field 'hiden_size'"),
    (lambda d: d["models"][0].update(gated="no"), "gated must be true or false"),
    (lambda d: d["models"][0].update(roles=["teacher"]), "roles must list one or both of target, draft"),
    (lambda d: d["models"][0]["config"].update(model_type="mamba"), "model_type 'mamba' is not one"),
    (lambda d: d["models"][0]["config"].update(num_key_value_heads=4), "not a multiple of num_key_value_heads"),
    (lambda d: _model(d, "Qwen/Qwen2.5-7B-Instruct")["drafts"].append("Qwen/Qwen9-1B"),
     "lists the draft Qwen/Qwen9-1B, which is not in the catalog"),
    (lambda d: _model(d, "Qwen/Qwen2.5-7B-Instruct")["drafts"].append("meta-llama/Llama-3.2-1B-Instruct"),
     "different tokenizers"),
    (lambda d: _model(d, "google/gemma-3-4b-it").pop("vision"), "loads a vision tower"),
    (lambda d: d["models"].append(d["models"][0]), "is listed twice"),
    (lambda d: d.update(schema_version=2), "schema_version 2 is newer than this specchat reads"),
    (lambda d: d.update(models=[]), "models must be a non-empty list"),
])
def test_a_malformed_catalog_gets_a_clear_error(shipped_document, change, message):
    with pytest.raises(CatalogError) as error:
        parse_catalog(_mutated(shipped_document, change), "catalog.json")
    assert message in str(error.value) and str(error.value).startswith("catalog.json")


def test_a_catalog_that_is_not_json_says_where(tmp_path):
    path = tmp_path / "catalog.json"
    path.write_text('{"schema_version": 1,\n "models": [}')
    with pytest.raises(CatalogError, match=r"not valid JSON: .* at line 2, column 13"):
        cat.load_catalog(path)
    with pytest.raises(CatalogError, match="cannot read the model catalog"):
        cat.load_catalog(tmp_path / "missing.json")


def test_predicted_speedup_is_leviathans_formula_on_the_curve():
    assert cat.speedup_at(0.7, 3, 0.1, 1.2) == pytest.approx((1 - 0.7 ** 4) / (1 - 0.7) / (3 * 0.1 + 1.2))
    flat = {n: 10.0 for n in range(1, 10)}  # a GPU-like curve: verifying 9 tokens costs what one does
    k, speedup = cat.predicted_speedup(flat, 1.0, 0.9)
    assert k >= 5 and speedup == pytest.approx(cat.speedup_at(0.9, k, 0.1, 1.0))
    steep = {n: 10.0 * n for n in range(1, 10)}  # verification as dear as decoding: nothing pays
    assert cat.predicted_speedup(steep, 1.0, 0.9) == (0, 1.0)
    from specchat.commands.measure_costs import predicted_speedups  # the same math as `specchat costs`

    curve = {1: 8.0, 2: 9.0, 3: 10.5, 4: 11.0, 5: 14.0}
    for row in predicted_speedups(curve, 1.5, [0.5, 0.7, 0.9]):
        k, speedup = cat.predicted_speedup(curve, 1.5, row["alpha"])
        assert (k, round(speedup, 3)) == (row["best_k"], row["speedup"])


def test_predictions_from_the_stored_costs(catalog):
    costs = cat.load_costs()
    assert costs.measured["date"] and costs.measured["cpu"] and costs.measured["torch"]
    for run in costs.runs:  # the stored reports' own predictions follow from their stored curves
        report = next(r["report"] for r in json.loads(cat.catalog_path("catalog_costs.json").read_text())["runs"] if r["shape"] == run.shape)
        for row in report["predicted"]:
            k, speedup = cat.predicted_speedup(run.forward_ms, run.draft_ms or 0.0, row["alpha"])
            assert speedup == pytest.approx(row["speedup"], abs=0.01)
    target, draft = catalog.get("HuggingFaceTB/SmolLM2-1.7B-Instruct"), catalog.get(SMOLLM2_135M)
    prediction = cat.pair_speedup(costs, target, draft, 0.7)
    assert prediction is not None and prediction.speedup >= 1.0 and "stated" in prediction.basis
    via_other_run = cat.pair_speedup(costs, target, catalog.get("HuggingFaceTB/SmolLM2-360M-Instruct"), 0.7)
    assert via_other_run is not None  # the 360M's step comes from its own run as a target
    assert cat.pair_speedup(costs, catalog.get("Qwen/Qwen2.5-7B-Instruct"), catalog.get(
        "Qwen/Qwen2.5-0.5B-Instruct"), 0.7) is None  # no such shape measured


def test_a_bad_cost_table_gets_a_clear_error(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text('{"runs": [{"shape": "x"}]}')
    with pytest.raises(CatalogError, match="not a cost table written by docs/measure/catalog_costs.sh"):
        cat.load_costs(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_prints_the_catalog(capsys):
    code, out, _ = run(capsys, "models", "catalog")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["model", "role", "family", "licence", "gated", "params"]
    assert any(line.startswith("Qwen/Qwen2.5-7B-Instruct ") and "Qwen2.5-0.5B" in line for line in lines)
    assert any(line.startswith("HuggingFaceTB/SmolLM2-1.7B-Instruct ") and "x K=" in line for line in lines)
    assert "predicted" in out and "stated" in out


def test_the_cli_prints_json_and_searches(capsys):
    code, out, _ = run(capsys, "models", "catalog", "--json", "--search", "qwen2.5", "--dtype", "q4")
    assert code == 0
    report = json.loads(out)
    assert report["here"]["dtype"] == "q4" and report["alpha"] == 0.7
    assert {m["family"] for m in report["models"]} == {"Qwen2.5"}
    qwen7 = next(m for m in report["models"] if m["id"] == "Qwen/Qwen2.5-7B-Instruct")
    assert qwen7["parameters"] == 7_615_616_512 and qwen7["gated"] is False
    assert qwen7["weights_bytes"]["bf16"] == 2 * 7_615_616_512
    assert qwen7["here"]["verdict"] in ("fits", "tight", "too big", "unknown")
    assert [d["id"] for d in qwen7["drafts"]] == ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"]
    assert qwen7["drafts"][0]["predicted"] is None and "lossless" in qwen7["drafts"][0]["compatibility"]


def test_the_cli_reports_no_match_and_bad_costs(capsys, tmp_path):
    code, _, err = run(capsys, "models", "catalog", "--search", "no such model")
    assert code == 1 and "no model in the catalog matches" in err
    bad = tmp_path / "costs.json"
    bad.write_text("not json")
    code, _, err = run(capsys, "models", "catalog", "--costs", str(bad))
    assert code == 2 and err.count("\n") == 1 and "not valid JSON" in err
