"""Settings → Models… on a CPU with llama.cpp: a model with GGUF files is offered as its default quantization (the
row's size, memory and verdict are the file's), Download fetches that one file from a local Hub on 127.0.0.1
(tests/gguf_hub.py), the row turns "on this computer", and choosing it puts the file's spec in Settings. Without
llama.cpp the same row offers the safetensors checkpoint, as tests/ui/test_models_dialog.py checks."""

import os

import pytest
from gguf_hub import FakeGgufHub
from hub_cache import offline_hf_cache
from huggingface_hub import constants
from PySide6.QtCore import Qt

from specchat.models.sources import ModelSource
from specchat.ui.model_rows import Machine
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings, SettingsDialog

SMOLLM2_17B = "HuggingFaceTB/SmolLM2-1.7B-Instruct"
GGUF_REPO, GGUF_FILE = "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "smollm2-1.7b-instruct-q4_k_m.gguf"
SPEC = f"{GGUF_REPO}/{GGUF_FILE}"
MACHINE = Machine("cpu", 8 * 2**30, native_bf16=False, llama_cpp=True)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    offline_hf_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    server = FakeGgufHub()
    server.repos[GGUF_REPO] = {GGUF_FILE: b"GGUF" + os.urandom(600_000)}  # the catalog pins no size for this file
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr("specchat.ui.models_dialog.machine_here", lambda device="auto": MACHINE)
    yield server
    server.close()


@pytest.fixture
def models(qtbot, store, hub):
    session = ChatSession(store, AppSettings(drafter="pld"), load_models=False)
    dialog = SettingsDialog(session.settings, lambda target, draft: (True, "compatible"))
    dialog.download_requested.connect(lambda hub_id: session.download(hub_id, dialog.download_progress))
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.open_models()
    qtbot.waitExposed(dialog.models_dialog)
    models = dialog.models_dialog
    models.settings_dialog = dialog  # for the test to read what was chosen
    yield models
    session.shutdown()


def cell(models, spec: str, column: str) -> str:
    from specchat.ui.models_dialog import COLUMNS

    index = next(i for i, row in enumerate(models.rows) if row.spec == spec)
    return models.table.item(index, COLUMNS.index(column)).text()


def test_the_cpu_is_offered_the_gguf_file_and_downloads_only_it(qtbot, models, hub):
    assert models.select(SMOLLM2_17B)  # found by its Hub id too
    row = models.selected_row()
    assert (row.spec, row.hub_id, row.quant) == (SPEC, SPEC, "Q4_K_M")
    assert cell(models, SPEC, "Download") == "~1.0 GB (Q4_K_M)"  # no size in the catalog: 1.71B at 4.85 bits
    assert cell(models, SPEC, "Memory here").endswith("(GGUF Q4_K_M)") and cell(models, SPEC, "Fits here") == "fits"
    assert f"Download: {SPEC}, Q4_K_M for llama.cpp" in models.details.text()
    assert models.draft.currentData().spec == "embedded"  # the curated draft, as without GGUF
    assert cell(models, SPEC, "State") == "not downloaded"
    qtbot.mouseClick(models.download_button, Qt.MouseButton.LeftButton)
    state = models.link.downloads.state(SPEC)
    qtbot.waitUntil(lambda: state.status == "done", timeout=30000)
    assert [path for path, _range in hub.requests] == [f"/api/models/{GGUF_REPO}/revision/main",
                                                       f"/{GGUF_REPO}/resolve/{hub.commit}/{GGUF_FILE}"]
    assert cell(models, SPEC, "State") == "on this computer" and not models.download_button.isEnabled()
    assert [r.spec for r in models.rows if r.entry is None] == []  # the GGUF repository is not a second row
    settings = models.settings_dialog
    qtbot.mouseClick(models.use_button, Qt.MouseButton.LeftButton)
    assert (settings.target.text(), settings.draft.text()) == (SPEC, "embedded")
    assert ModelSource.parse(SPEC).kind == "gguf"  # what Settings will load: the downloaded file


def test_a_qwen_coder_row_offers_the_pinned_file_with_its_real_size(models):
    models.select("Qwen/Qwen2.5-Coder-1.5B-Instruct")
    row = models.selected_row()
    assert row.spec == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert row.download == "1.1 GB (Q4_K_M)"
    labels = [models.draft.itemText(i) for i in range(models.draft.count())]
    assert labels[0].startswith("✔ Qwen2.5 Coder 0.5B Instruct (Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/")
    assert labels[1] == "✔ through text: SmolLM2 135M Instruct (embedded)"  # the universal draft, second
