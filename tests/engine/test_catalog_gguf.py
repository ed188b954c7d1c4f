"""GGUF files in the catalog: an entry's "gguf" block is checked as strictly as the other fields, the memory of a
quantized model follows from its file (its real size, or bits per weight of its type) with llama.cpp's bfloat16 KV
cache, the terminal and the Models dialog judge a model's format and verdict with one function, the CPU's choice of
float32 uses the same memory rule, and `specchat models catalog` shows the quantization and the download. Fast: no
network, no model loads."""

import json
import math

import pytest

from specchat.cli import main
from specchat.models.catalog import entries as cat
from specchat.models.catalog.entries import CatalogError, parse_catalog
from specchat.models.catalog.fit import Machine, offer, run_format, run_here

CODER = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
CODER_DRAFT = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
CODER_FILE = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
CODER_BYTES = 1_117_320_768  # the file on the Hub, as the offline pair pins it (models/offline_pair.py)
GIB = 2**30
CPU_LLAMA = Machine("cpu", 8 * GIB, native_bf16=False, llama_cpp=True)


def test_the_offline_pairs_models_are_in_the_catalog_with_their_files(catalog):
    from specchat.models.offline_pair import MODELS

    target = catalog.get(CODER)
    assert [d.id for d in catalog.drafts_for(target)] == [CODER_DRAFT]
    assert [d.load_spec for d in catalog.universal_drafts_for(target)] == ["embedded"]  # SmolLM2-135M, through text
    assert "through text" in cat.compatibility(target, catalog.universal_drafts_for(target)[0]).explanation
    pinned = {model.upstream: (model.file_name, model.size, model.sha256) for model in MODELS}
    for entry in (target, catalog.get(CODER_DRAFT)):
        quant = entry.gguf.get()
        assert entry.gguf.default == "Q4_K_M" and entry.gguf.verified
        assert (quant.file, quant.size, quant.sha256) == pinned[entry.gguf.repo]  # the same file as the pair's
    assert target.gguf.spec() == CODER_FILE


def test_every_gguf_block_names_files_of_its_quantizations(catalog):
    blocks = [entry for entry in catalog.entries if entry.gguf is not None]
    assert len(blocks) >= 12
    for entry in blocks:
        assert entry.vision is None and entry.gguf.get().name == entry.gguf.default
        for quant in entry.gguf.quants:
            assert quant.name.lower() in quant.file.lower() and quant.file.endswith(".gguf")
    unverified = {entry.id for entry in blocks if not entry.gguf.verified}
    assert unverified and all(catalog.get(model_id).gguf.note for model_id in unverified)  # each says why


def _mutated(document, model_id, change):
    document = json.loads(json.dumps(document))
    change(next(m for m in document["models"] if m["id"] == model_id))
    return json.dumps(document)


def _gguf(entry):
    return entry["gguf"]


@pytest.mark.parametrize("change, message", [
    (lambda e: _gguf(e)["quants"].update(Q4_K_X={"file": "x-q4_k_x.gguf"}), "unknown quantization 'Q4_K_X'"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].pop("file"), "quant Q4_K_M: missing field 'file'"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(bytes=5), "unknown field 'bytes'"),
    (lambda e: _gguf(e).update(repository="x/y"), "unknown field 'repository'"),
    (lambda e: _gguf(e).pop("verified"), "missing field 'verified'"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(file="qwen2.5-coder-1.5b-instruct-q8_0.gguf"),
     "does not name the quantization Q4_K_M"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(file="../q4_k_m.gguf"), "one file name at the repository's top"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(file="q4_k_m.bin"), "is not a .gguf file"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(file="x-q4_k_m-00001-of-00002.gguf"), "split GGUF file"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(sha256="CC32"), "sha256 must be 64 lowercase hex digits"),
    (lambda e: _gguf(e)["quants"]["Q4_K_M"].update(size=0), "size must be at least 1"),
    (lambda e: _gguf(e).update(default="Q8_0"), "default 'Q8_0' is not one of its quants"),
    (lambda e: _gguf(e).update(quants={"Q8_0": {"file": "x-q8_0.gguf"}}), "no Q4_K_M file, so give \"default\""),
    (lambda e: _gguf(e).update(quants={}), "quants must name at least one"),
    (lambda e: _gguf(e).update(repo="../etc"), "is not a Hub model id"),
    (lambda e: e.update(universal_drafts=[CODER_DRAFT]), "has its tokenizer (qwen2.5): list it in drafts"),
    (lambda e: e.update(universal_drafts=["org/missing"]), "is not in the catalog"),
])
def test_a_bad_gguf_block_is_refused(shipped_document, change, message):
    with pytest.raises(CatalogError) as error:
        parse_catalog(_mutated(shipped_document, CODER, change), "catalog.json")
    assert message in str(error.value) and str(error.value).startswith("catalog.json: ")  # names the entry


def test_a_multimodal_model_gets_no_gguf_block(shipped_document):
    gguf = {"repo": "x/gemma-GGUF", "verified": False, "quants": {"Q4_K_M": {"file": "g-q4_k_m.gguf"}}}
    with pytest.raises(CatalogError, match="vision tower is a separate file"):
        parse_catalog(_mutated(shipped_document, "google/gemma-3-4b-it", lambda e: e.update(gguf=gguf)))


def test_memory_of_a_quantized_model_is_its_file_and_a_bfloat16_cache(catalog):
    coder = catalog.get(CODER)
    assert cat.weights_bytes(coder, "Q4_K_M") == CODER_BYTES == cat.download_bytes(coder, "q4_k_m")
    assert cat.download_bytes(coder) == 2 * cat.parameter_count(coder)  # without a format: the bf16 checkpoint
    kv = 2 * 2 * 128 * 28 * 2  # K and V, 2 KV heads of 128, 28 layers, 2 bytes (bf16): per token
    assert cat.kv_cache_bytes(coder, 4096, "Q4_K_M") == 4096 * kv == cat.kv_cache_bytes(coder, 4096, "bf16")
    assert cat.kv_bytes_per_1k(coder, "Q4_K_M") == 1000 * kv
    needed = CODER_BYTES + 4096 * kv + cat.RUNTIME_BYTES
    assert cat.memory_needed(coder, "Q4_K_M") == needed
    assert cat.fits_in_memory(coder, "Q4_K_M", needed * 12 // 10 + 1).verdict == "fits"
    assert cat.fits_in_memory(coder, "Q4_K_M", needed).verdict == "tight"
    assert cat.fits_in_memory(coder, "Q4_K_M", needed - 1).verdict == "too big"
    assert cat.fits_in_memory(coder, "Q4_K_M", GIB).explain().startswith("too big: needs 1.8 GB at Q4_K_M")
    # a type the catalog gives no file size for: parameters x its average bits per weight
    draft, qwen3 = catalog.get(CODER_DRAFT), catalog.get("Qwen/Qwen3-0.6B")  # Qwen3-0.6B's file has no size here
    for entry, quant, bits in ((draft, "Q5_K_M", 5.69), (draft, "Q6_K", 6.56), (draft, "Q8_0", 8.5),
                               (draft, "Q4_0", 4.5), (draft, "IQ4_XS", 4.25), (qwen3, "Q4_K_M", 4.85)):
        assert cat.weights_bytes(entry, quant) == round(cat.parameter_count(entry) * bits / 8)
    with pytest.raises(CatalogError, match="unknown weight format 'Q9_K'"):
        cat.weights_bytes(coder, "Q9_K")


def test_the_cpu_with_llama_cpp_is_offered_the_gguf_file_and_a_gpu_the_checkpoint(catalog):
    coder = catalog.get(CODER)
    assert run_format(coder, "auto", CPU_LLAMA) == "Q4_K_M"
    assert run_format(coder, "float32", CPU_LLAMA) == "Q4_K_M"  # Precision is the torch path's setting
    offered = offer(coder, "Q4_K_M")
    assert (offered.spec, offered.download, offered.quant, offered.download_bytes) == \
        (CODER_FILE, CODER_FILE, "Q4_K_M", CODER_BYTES)
    no_llama = Machine("cpu", 8 * GIB, native_bf16=False)
    assert run_format(coder, "auto", no_llama) == "fp32" and offer(coder, "fp32").spec == CODER
    gpu = Machine("cuda", 8 * GIB, native_bf16=False, gpu_format="fp16")
    assert run_format(coder, "auto", gpu) == "fp16" and offer(coder, "fp16").download == CODER
    embedded = catalog.get("embedded")
    assert run_format(embedded, "auto", CPU_LLAMA) == "q4" and offer(embedded, "q4").download is None
    assert run_format(coder, "auto", CPU_LLAMA, dtype="q8_0") == "q8_0"  # --dtype wins


def test_the_cpus_float_format_follows_the_one_memory_rule(catalog):
    from specchat.models.catalog.entries import fits_at_float32

    qwen7 = catalog.get("Qwen/Qwen2.5-7B-Instruct")  # 30.5 GB at float32
    native = Machine("cpu", 64 * GIB, native_bf16=True)
    assert run_format(qwen7, "auto", native) == "fp32"
    small = Machine("cpu", 24 * GIB, native_bf16=True)
    assert run_format(qwen7, "auto", small) == "bf16"  # too big at float32, and bf16 is native
    assert run_format(qwen7, "auto", Machine("cpu", 24 * GIB, native_bf16=False)) == "fp32"
    parameters = cat.parameter_count(qwen7)
    for available in (20 * GIB, 36 * GIB, 37 * GIB, 64 * GIB):  # the loader's choice: the same rule, on weights
        expected = cat.memory_verdict(parameters * 4 + cat.RUNTIME_BYTES, available) == "fits"
        assert fits_at_float32(parameters, available) is expected
    assert fits_at_float32(parameters, None)  # unknown memory keeps the exact format
    # where the weights fit at float32 with the headroom but not with a chat's KV cache too, the loader keeps
    # float32 (it cannot know the chat's length), and the catalog says what the loader does
    edge = math.ceil((parameters * 4 + cat.RUNTIME_BYTES) * cat.HEADROOM)
    assert fits_at_float32(parameters, edge) and cat.fits_in_memory(qwen7, "fp32", edge).verdict == "tight"
    assert run_format(qwen7, "auto", Machine("cpu", edge, native_bf16=True)) == "fp32"
    assert run_format(qwen7, "auto", Machine("cpu", edge - 2**20, native_bf16=True)) == "bf16"


def test_the_terminal_and_the_models_dialog_judge_every_model_alike(catalog):
    from specchat.commands.catalog_report import _download_cell, _record
    from specchat.ui.model_rows import catalog_rows, format_label

    for machine in (CPU_LLAMA, Machine("cpu", 3 * GIB, native_bf16=True), Machine("cuda", 20 * GIB, False)):
        rows = catalog_rows(catalog, None, machine, "auto")
        for entry, row in zip(catalog.entries, rows):
            record = _record(catalog, entry, machine, None, None, 0.7)["here"]
            assert (record["verdict"], record["needed_bytes"]) == (row.fit.verdict, row.fit.needed_bytes)
            assert (record["load_as"], record["download"], record["quant"]) == (row.spec, row.hub_id, row.quant)
            here = run_here(entry, machine)  # the one judgement both show
            assert (here.fit, here.offer.spec) == (row.fit, row.spec)
            assert row.memory.endswith(f"({format_label(here.format)})")
            if here.offer.download_bytes is not None:  # one size, one unit, in the row and the table's cell
                assert row.download.startswith(here.offer.size_text()) and \
                    _download_cell({"here": record}).startswith(here.offer.size_text())


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_shows_the_quantization_and_the_download(capsys, monkeypatch):
    monkeypatch.setattr("specchat.commands.catalog_report.machine_here", lambda device="auto": CPU_LLAMA)
    code, out, _ = run(capsys, "models", "catalog", "--search", "coder")
    assert code == 0
    header, *lines = out.splitlines()
    assert "gguf" in header.split() and "download here" in header
    coder = next(line for line in lines if line.startswith(CODER + " "))
    assert "Q4_K_M 1.1 GB" in coder and "fits Q4_K_M" in coder and "Qwen2.5-Coder-0.5B, SmolLM2-135M" in coder
    code, out, _ = run(capsys, "models", "catalog", "--json", "--search", "coder")
    record = next(m for m in json.loads(out)["models"] if m["id"] == CODER)
    assert record["here"]["load_as"] == CODER_FILE and record["here"]["download_bytes"] == CODER_BYTES
    assert record["gguf"]["quants"][0]["sha256"].startswith("cc324af0") and record["weights_bytes"]["Q4_K_M"] == \
        CODER_BYTES
    code, out, _ = run(capsys, "models", "catalog", "--json", "--search", "coder", "--dtype", "q5_k_m")
    assert json.loads(out)["models"][0]["here"]["dtype"] == "Q5_K_M"
    code, _, err = run(capsys, "models", "catalog", "--dtype", "q9")
    assert code == 2 and "unknown weight format 'q9'" in err
