"""The Models dialog (Settings → Models…), downloads and the Precision setting.

No test reaches the internet. The network tests run a real HTTP server on 127.0.0.1 that answers as much of the
Hub's API as a download uses (the model's file list, and its files with HTTP Range), point huggingface_hub's
endpoint at it, and record every request it gets: a download's requests reach it, with the right repository and
the Range that resumes a cancelled file, while huggingface_hub's offline switch stays on for every other thread."""

import hashlib
import json
import os
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler

import pytest
import torch
from hub_cache import offline_hf_cache
from huggingface_hub import constants, scan_cache_dir
from local_http import send, send_file_head, serve_get, stop_server
from PySide6.QtCore import Qt

from specchat.core.errors import SpecchatError
from specchat.core.formatting import format_size
from specchat.engine.loading.load import LoadedModel
from specchat.models.catalog.entries import load_catalog
from specchat.models.hub.snapshots import cached_snapshot, kept_bytes, network_for_this_thread
from specchat.models.sources import ModelSource
from specchat.ui.downloads import DownloadState, TransferRate
from specchat.ui.model_rows import GATED_HINT, Machine
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings, SettingsDialog

SMOLLM2_17B = "HuggingFaceTB/SmolLM2-1.7B-Instruct"
COMMIT = "1234567890abcdef1234567890abcdef12345678"
MACHINE = Machine("cpu", 8 * 2**30, native_bf16=False)  # 8.6 GB free: SmolLM2-1.7B at float32 (9.0 GB) is too big


class FakeHub:
    """A local Hub: GET /api/models/<id> lists a repository's files (sizes, git blob ids, LFS
    sha256), GET /<id>/resolve/<commit>/<file> serves a file (honouring Range), everything else is a 404 as the
    Hub words it. `pause_at`: serving a whole file stops after that many bytes until `resume` is set."""

    def __init__(self, repos: dict[str, dict[str, bytes]] | None = None):
        self.repos = repos or {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.pause_at: int | None = None
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.server, self.url = serve_get(self.answer)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests.append(("GET", handler.path, handler.headers.get("Range")))
        path = handler.path.split("?")[0]
        listing = re.fullmatch(r"/api/models/(.+?)(?:/revision/main)?", path)
        resolve = re.fullmatch(rf"/(.+)/resolve/{COMMIT}/(.+)", path)
        if listing and listing[1] in self.repos:
            siblings = [_sibling(name, content) for name, content in self.repos[listing[1]].items()]
            send(handler, 200, json.dumps({"id": listing[1], "sha": COMMIT, "siblings": siblings}).encode(),
                 {"Content-Type": "application/json"})
        elif resolve and resolve[2] in self.repos.get(resolve[1], {}):
            self.send_file(handler, self.repos[resolve[1]][resolve[2]])
        else:
            send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

    def send_file(self, handler, content: bytes) -> None:
        start = send_file_head(handler, content)
        if not start and self.pause_at is not None:
            handler.wfile.write(content[:self.pause_at])
            handler.wfile.flush()
            self.paused.set()
            self.resume.wait(20)
            start = self.pause_at
        handler.wfile.write(content[start:])

    def paths(self) -> list[str]:
        return [path.split("?")[0] for _method, path, _range in self.requests]

    def close(self) -> None:
        self.resume.set()
        stop_server(self.server)


def _sibling(name: str, content: bytes) -> dict:
    git_blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()
    sibling = {"rfilename": name, "size": len(content), "blobId": git_blob}
    if name.endswith(".safetensors"):
        sibling["lfs"] = {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
    return sibling


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache of the test's own, and huggingface_hub offline as the app runs it."""
    return offline_hf_cache(tmp_path, monkeypatch)


@pytest.fixture
def fake_hub(hf_cache, monkeypatch):
    hub = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    yield hub
    hub.close()


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.setattr("specchat.ui.models_dialog.machine_here", lambda device="auto": MACHINE)
    return MACHINE


@pytest.fixture
def settings_dialog(qtbot, store, machine):
    """The Settings dialog wired to a session as the window wires it (main_window.open_settings)."""
    session = ChatSession(store, AppSettings(drafter="pld"), load_models=False)
    dialog = SettingsDialog(session.settings, session.check_pair, check_thread=session.background)
    dialog.download_requested.connect(lambda hub_id: session.download(hub_id, dialog.download_progress))
    qtbot.addWidget(dialog)
    dialog.show()
    yield dialog
    session.shutdown()


def checked(qtbot, dialog):
    """Waits for the dialog's pair check, which runs on the session's background thread (test_pair_check.py)."""
    qtbot.waitUntil(lambda: not dialog.pair_check.running, timeout=30000)


def open_models(qtbot, dialog):
    dialog.open_models()
    models = dialog.models_dialog
    qtbot.waitExposed(models)
    return models


def cell(models, spec: str, column: str) -> str:
    from specchat.ui.models_dialog import COLUMNS

    index = next(i for i, row in enumerate(models.rows) if row.spec == spec)
    return models.table.item(index, COLUMNS.index(column)).text()


# --- (a) the list ---------------------------------------------------------------------------------------------------

def test_every_column_shows_whole_where_the_screen_has_room(qtbot, settings_dialog, hf_cache):
    models = open_models(qtbot, settings_dialog)
    assert models.width() <= models.screen().availableGeometry().width() - 40  # the test's screen: 800 px
    models.resize(models.columns_width(), models.height())  # a screen wide enough
    qtbot.waitUntil(lambda: models.table.viewport().width() >= models.table.horizontalHeader().length())
    table, header = models.table, models.table.horizontalHeader()
    qtbot.waitUntil(lambda: not table.horizontalScrollBar().isVisible(), timeout=2000)
    for column in range(header.count()):  # no column narrower than its longest cell, the State's last
        assert header.sectionSize(column) >= table.sizeHintForColumn(column), header.model().headerData(
            column, Qt.Orientation.Horizontal)


def test_the_dialog_lists_the_catalog_with_verdicts_and_search_filters_rows(qtbot, settings_dialog, hf_cache):
    models = open_models(qtbot, settings_dialog)
    catalog = load_catalog()
    assert [row.spec for row in models.rows] == [entry.load_spec for entry in catalog.entries]
    assert "network" in models.network_note.text() and "nothing else in specchat" in models.network_note.text()
    # verdicts for a machine with 8 GiB (8.6 GB) free, at the format each would run in
    assert cell(models, "HuggingFaceTB/SmolLM2-360M-Instruct", "Fits here") == "fits"
    assert cell(models, SMOLLM2_17B, "Fits here") == "too big"
    assert cell(models, SMOLLM2_17B, "Memory here") == "9.0 GB (float32)"
    assert cell(models, "embedded", "Memory here").endswith("(GGUF Q4)")
    assert cell(models, "embedded", "State") == "ships with specchat"
    assert models.selected_row().spec == "embedded"  # Settings' target, selected at the start
    assert cell(models, SMOLLM2_17B, "State") == "not downloaded"
    assert cell(models, SMOLLM2_17B, "Download") == "3.4 GB"
    assert cell(models, SMOLLM2_17B, "Speedup α=0.7").startswith("1.11×")
    index = [row.spec for row in models.rows].index("meta-llama/Llama-3.1-8B-Instruct")
    assert cell(models, "meta-llama/Llama-3.1-8B-Instruct", "Licence") == "llama3.1 (gated)"
    assert GATED_HINT in models.table.item(index, 3).toolTip()
    assert "too big: needs" in models.table.item(index, 7).toolTip()  # the verdict's reason
    models.search.setText("qwen3")
    assert {row.family for row in models.visible_rows()} == {"Qwen3"} and len(models.visible_rows()) == 4
    models.search.setText("gemma")
    assert all(row.entry.licence == "gemma" for row in models.visible_rows())
    models.search.setText("")
    assert len(models.visible_rows()) == len(catalog.entries)


# --- (b) choosing a target ------------------------------------------------------------------------------------------

def test_choosing_smollm2_17b_fills_the_target_and_offers_the_embedded_draft(qtbot, settings_dialog, hf_cache):
    models = open_models(qtbot, settings_dialog)
    assert models.select(SMOLLM2_17B)
    assert models.draft.currentData().spec == "embedded"  # the first compatible draft: the embedded 135M
    assert models.compat.text() == "✔ Same tokenizer (smollm2), lossless"
    qwen = next(i for i in range(models.draft.count()) if "Qwen2.5 0.5B" in models.draft.itemText(i))
    assert models.draft.itemText(qwen) == "✔ through text: Qwen2.5 0.5B Instruct (Qwen/Qwen2.5-0.5B-Instruct, not " \
                                          "downloaded)"
    models.draft.setCurrentIndex(qwen)  # another tokenizer: the mismatch is explained, and drafting goes through text
    assert models.compat.text().startswith("✔ Different tokenizers (Qwen2.5-0.5B: qwen2.5, SmolLM2-1.7B: smollm2): "
                                           "drafts go through text")
    assert models.use_button.isEnabled()
    models.draft.setCurrentIndex(0)
    qtbot.mouseClick(models.use_button, Qt.MouseButton.LeftButton)
    assert settings_dialog.target.text() == SMOLLM2_17B and settings_dialog.draft.text() == "embedded"
    assert settings_dialog.drafter.currentData() == "hybrid"  # lookup first, the draft model where it pays
    # not downloaded: Settings says where to get it, and does not let a load fail
    assert "is not downloaded yet: download it with Models…" in settings_dialog.compat.text()
    assert not settings_dialog.ok_button.isEnabled()


def test_a_hub_draft_that_is_not_downloaded_is_said_so(qtbot, settings_dialog, hf_cache):
    place_in_cache(hf_cache, SMOLLM2_17B)
    models = open_models(qtbot, settings_dialog)
    models.select(SMOLLM2_17B)
    models.draft.setCurrentIndex(1)
    assert models.draft.currentText() == \
        "✔ SmolLM2 360M Instruct (HuggingFaceTB/SmolLM2-360M-Instruct, not downloaded)"
    assert models.compat.text().endswith("The draft is not downloaded yet: download it too.")
    models.use_selected()
    assert settings_dialog.compat.text().startswith("✖ HuggingFaceTB/SmolLM2-360M-Instruct is not downloaded yet")


def test_a_draft_with_another_tokenizer_is_chosen_with_the_draft_model_drafter(qtbot, settings_dialog, hf_cache):
    models = open_models(qtbot, settings_dialog)
    models.select(SMOLLM2_17B)
    models.draft.setCurrentIndex(models.draft.findText("through text: Qwen3 0.6B", Qt.MatchFlag.MatchContains))
    models.use_selected()
    assert (settings_dialog.draft.text(), settings_dialog.drafter.currentData()) == ("Qwen/Qwen3-0.6B", "hybrid")
    open_models(qtbot, settings_dialog).select(SMOLLM2_17B)
    settings_dialog.models_dialog.draft.setCurrentIndex(settings_dialog.models_dialog.draft.count() - 1)
    settings_dialog.models_dialog.use_selected()  # no draft model: prompt lookup
    assert (settings_dialog.draft.text(), settings_dialog.drafter.currentData()) == ("", "pld")


def test_a_draft_model_cannot_be_chosen_as_target(qtbot, settings_dialog, hf_cache):
    models = open_models(qtbot, settings_dialog)
    models.select("Qwen/Qwen2.5-0.5B-Instruct")
    assert not models.use_button.isEnabled() and "draft model only" in models.compat.text()


# --- (c) the network path, up to the request ------------------------------------------------------------------------

def test_download_reaches_the_hub_with_the_right_repo_and_a_refusal_is_a_clear_error(qtbot, settings_dialog, fake_hub,
                                                                                     capfd):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import OfflineModeIsEnabled

    models = open_models(qtbot, settings_dialog)
    assert f"({fake_hub.url.removeprefix('http://')})" in models.network_note.text()
    models.select(SMOLLM2_17B)
    qtbot.mouseClick(models.download_button, Qt.MouseButton.LeftButton)
    downloads = models.link.downloads
    qtbot.waitUntil(lambda: downloads.state(SMOLLM2_17B).status == "failed", timeout=20000)
    assert fake_hub.paths() == [f"/api/models/{SMOLLM2_17B}"]  # that request only: no telemetry either
    text = models.progress_label.text()
    assert text.startswith(f"Download failed: {SMOLLM2_17B} was not found on {fake_hub.url}")
    assert "Traceback" not in text and "Traceback" not in capfd.readouterr().err
    assert cell(models, SMOLLM2_17B, "State") == "not downloaded" and models.download_button.isEnabled()
    # the switch is back: huggingface_hub's own flag, and a request from here is refused before it leaves
    assert constants.HF_HUB_OFFLINE is True
    with pytest.raises(OfflineModeIsEnabled):
        HfApi(endpoint=fake_hub.url).model_info(SMOLLM2_17B)
    assert len(fake_hub.requests) == 1


def test_while_a_download_runs_no_other_thread_reaches_the_network(fake_hub):
    """The switch opens for the downloading thread only: a Hub request from any other thread is refused while
    the download's own request is under way, and loading a Hub model reads the cache only."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import OfflineModeIsEnabled

    from specchat.engine.loading.load import load_tokenizer

    fake_hub.repos["org/model"] = {"model.safetensors": b"x" * 300_000, "config.json": b"{}"}
    fake_hub.pause_at = 100_000
    done = threading.Event()

    def download():
        try:
            from specchat.models.hub.download import download_from_hub

            download_from_hub("org/model", on_progress=lambda progress: None)
        finally:
            done.set()

    threading.Thread(target=download, daemon=True).start()
    assert fake_hub.paused.wait(20)  # the download thread is inside its request now
    assert bool(constants.HF_HUB_OFFLINE) is True  # as seen from this thread
    with pytest.raises(OfflineModeIsEnabled):
        HfApi(endpoint=fake_hub.url).model_info("org/other")
    with pytest.raises(Exception, match="not downloaded"):
        load_tokenizer(ModelSource.parse("org/model"))
    fake_hub.resume.set()
    assert done.wait(20)
    assert "/api/models/org/other" not in fake_hub.paths()
    assert constants.HF_HUB_OFFLINE is True and cached_snapshot("org/model") is not None


def test_the_switch_counts_nested_and_concurrent_users():
    with network_for_this_thread():
        with network_for_this_thread():
            assert not constants.HF_HUB_OFFLINE
        assert not constants.HF_HUB_OFFLINE  # the outer block still holds it
    assert constants.HF_HUB_OFFLINE is True  # conftest: the tests run offline, as the app


# --- (d) progress, cancel and resume ------------------------------------------------------------------------------

def test_cancel_keeps_the_partial_file_and_the_next_download_resumes_it(qtbot, settings_dialog, fake_hub):
    weights = os.urandom(3_000_000)
    fake_hub.repos["test-org/tiny-model"] = {"model.safetensors": weights, "config.json": b'{"model_type": "x"}',
                                             "model.bin": b"pickled", "onnx/model.json": b"{}"}
    fake_hub.pause_at = 1_000_000
    models = open_models(qtbot, settings_dialog)
    models.other_id.setText("test-org/tiny-model")
    qtbot.keyClick(models.other_id, Qt.Key.Key_Return)
    assert models.isVisible()  # Enter starts the download; it neither chooses a model nor closes the dialog
    downloads = models.link.downloads
    state = downloads.state("test-org/tiny-model")
    assert fake_hub.paused.wait(20)
    qtbot.waitUntil(lambda: state.total_bytes == 3_000_000 + 19 and models.cancel_button.isVisible(), timeout=10000)
    assert models.progress.isVisible() and "of 3.0 MB" in models.progress_label.text()
    qtbot.mouseClick(models.cancel_button, Qt.MouseButton.LeftButton)
    fake_hub.resume.set()  # the next chunk arrives, and the download sees the cancel there
    qtbot.waitUntil(lambda: state.status == "cancelled", timeout=20000)
    kept = kept_bytes("test-org/tiny-model")  # what was written before the cancel: whole chunks
    assert 0 < kept <= 1_000_000
    assert models.progress_label.text() == \
        f"test-org/tiny-model: Cancelled: {format_size(kept)} kept, the next download resumes."
    assert cached_snapshot("test-org/tiny-model") is None  # not complete, so not loadable

    fake_hub.pause_at, fake_hub.requests[:] = None, []
    qtbot.keyClick(models.other_id, Qt.Key.Key_Return)
    state = downloads.state("test-org/tiny-model")
    qtbot.waitUntil(lambda: state.status == "done", timeout=20000)
    assert ("GET", f"/test-org/tiny-model/resolve/{COMMIT}/model.safetensors", f"bytes={kept}-") in fake_hub.requests
    assert not any("model.bin" in path or "onnx" in path for path in fake_hub.paths())  # safetensors, top level only
    folder = cached_snapshot("test-org/tiny-model")
    assert (folder / "model.safetensors").read_bytes() == weights and kept_bytes("test-org/tiny-model") == 0
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    assert cell(models, "test-org/tiny-model", "State") == "on this computer"  # listed among the local models
    assert models.select("test-org/tiny-model") and not models.download_button.isEnabled()
    scan = scan_cache_dir(constants.HF_HUB_CACHE)  # huggingface_hub reads what the download wrote
    assert [repo.repo_id for repo in scan.repos] == ["test-org/tiny-model"] and not scan.warnings
    assert {file.file_name for repo in scan.repos for revision in repo.revisions for file in revision.files} == \
        {"config.json", "model.safetensors"}


def test_download_smollm2_17b_from_the_catalog_then_choose_it_with_the_embedded_draft(qtbot, settings_dialog,
                                                                                        fake_hub):
    """The whole path on a local Hub: the catalog row's Download, progress to the end, the row turns "on this
    computer", and choosing it passes Settings' check of the real tokenizers against the embedded draft. (The
    local Hub serves the shipped draft's files under SmolLM2-1.7B's id: they have SmolLM2's tokenizer.)"""
    from specchat.models.sources import shipped_draft_folder

    names = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors",
             "chat_template.jinja", "README.md")
    fake_hub.repos[SMOLLM2_17B] = {name: (shipped_draft_folder() / name).read_bytes() for name in names}
    models = open_models(qtbot, settings_dialog)
    models.select(SMOLLM2_17B)
    qtbot.mouseClick(models.download_button, Qt.MouseButton.LeftButton)
    state = models.link.downloads.state(SMOLLM2_17B)
    qtbot.waitUntil(lambda: state.status == "done", timeout=30000)
    assert cell(models, SMOLLM2_17B, "State") == "on this computer"
    assert models.selected_row().spec == SMOLLM2_17B and not models.download_button.isEnabled()
    assert models.progress_label.text().startswith(f"{SMOLLM2_17B}: Downloaded to ")
    assert "README.md" not in os.listdir(cached_snapshot(SMOLLM2_17B))  # only what a model folder needs
    qtbot.mouseClick(models.use_button, Qt.MouseButton.LeftButton)
    checked(qtbot, settings_dialog)
    assert settings_dialog.compat.text().startswith("✔ Compatible") and settings_dialog.ok_button.isEnabled()
    assert (settings_dialog.settings().target, settings_dialog.settings().draft) == (SMOLLM2_17B, "embedded")


def test_a_file_that_arrives_damaged_is_dropped(fake_hub):
    from specchat.core.errors import ModelLoadError
    from specchat.models.hub.download import download_from_hub

    fake_hub.repos["org/model"] = {"model.safetensors": b"good" * 1000}
    partial = fake_hub.repos["org/model"]
    blobs = constants.HF_HUB_CACHE + "/models--org--model/blobs"
    os.makedirs(blobs)
    with open(f"{blobs}/{hashlib.sha256(partial['model.safetensors']).hexdigest()}.incomplete", "wb") as out:
        out.write(b"bad!" * 500)  # a partial file of other bytes: continuing it gives a wrong checksum
    with pytest.raises(ModelLoadError, match="arrived damaged"):
        download_from_hub("org/model", on_progress=lambda progress: None)
    assert kept_bytes("org/model") == 0
    assert download_from_hub("org/model", on_progress=lambda progress: None).endswith(COMMIT)


def test_speed_is_smoothed_and_the_time_left_follows_it():
    now = [0.0]
    rate = TransferRate(half_life_s=3.0, warm_up_s=1.0, stall_after_s=1.0, clock=lambda: now[0])
    state = DownloadState("org/model", status="downloading", done_bytes=0, total_bytes=100_000_000, rate=rate)
    for second in range(11):  # 1 MB a second
        now[0] = second
        rate.update(second * 1_000_000, now[0])
    state.done_bytes = 10_000_000
    assert rate.speed() == pytest.approx(1_000_000)
    assert state.describe() == "10 MB of 100 MB · 1.0 MB/s · about 2 min left"
    now[0] = 11.5
    rate.update(10_000_000 + 5_000_000)  # one burst moves it, not all the way
    assert 1_000_000 < rate.speed() < 5_000_000
    now[0] = 11.5 + 1 + 6  # six seconds of nothing after the grace second: a quarter of the speed
    assert rate.speed() == pytest.approx(rate._rate / 4)
    fresh = TransferRate(clock=lambda: 0.0)
    fresh.update(500_000, 0.0)
    fresh.update(900_000, 0.5)
    assert fresh.speed() is None  # warming up
    assert DownloadState("x/y", status="downloading", total_bytes=10, rate=fresh).describe().endswith(
        "measuring the speed…")


def test_a_failure_nobody_watches_goes_to_the_window_banner(qtbot, store, fake_hub):
    session = ChatSession(store, AppSettings(), load_models=False)
    session.downloads.start("org/missing")
    qtbot.waitUntil(lambda: session.error is not None, timeout=20000)
    assert session.error.startswith("Download failed: org/missing was not found")
    session.error = None
    session.downloads.start("not a repo id")
    qtbot.waitUntil(lambda: session.error is not None, timeout=20000)
    assert session.error == "Download failed: 'not a repo id' is not a Hugging Face Hub id (expected org/name)"
    session.shutdown()


# --- (e) the offline path ---------------------------------------------------------------------------------------

def place_in_cache(cache, repo_id: str) -> None:
    """A model folder where a downloaded Hub model lives (the cache layout huggingface_hub writes): here the
    shipped draft's files, which have SmolLM2's tokenizer."""
    from specchat.models.sources import shipped_draft_folder

    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json", "model.safetensors"):
        os.symlink(shipped_draft_folder() / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)


def test_a_downloaded_model_is_on_this_computer_and_chosen_with_the_embedded_draft(qtbot, settings_dialog, hf_cache):
    place_in_cache(hf_cache, SMOLLM2_17B)
    models = open_models(qtbot, settings_dialog)
    assert cell(models, SMOLLM2_17B, "State") == "on this computer"
    models.select(SMOLLM2_17B)
    assert not models.download_button.isEnabled()
    assert models.draft.currentText() == "✔ SmolLM2 135M Instruct (embedded)"
    qtbot.mouseClick(models.use_button, Qt.MouseButton.LeftButton)
    checked(qtbot, settings_dialog)
    assert settings_dialog.compat.text().startswith("✔ Compatible")  # the real tokenizers, compared offline
    assert settings_dialog.ok_button.isEnabled()
    chosen = settings_dialog.settings()
    assert (chosen.target, chosen.draft, chosen.drafter) == (SMOLLM2_17B, "embedded", "hybrid")
    assert ModelSource.parse(chosen.target).kind == "hub"


def test_the_settings_dialog_has_no_raw_hub_row_and_opens_models(qtbot, settings_dialog):
    assert not hasattr(settings_dialog, "hub_id")
    assert settings_dialog.download_progress.downloads is None  # linked once the Models dialog asks


# --- Precision ------------------------------------------------------------------------------------------------------

def test_precision_is_a_setting_that_reloads_and_reaches_the_load_options(qtbot, store, monkeypatch):
    auto, bf16 = AppSettings(), AppSettings(precision="bfloat16")
    assert auto.load_dtype is None and bf16.load_dtype == "bfloat16"
    assert auto.model_key() != bf16.model_key()
    assert AppSettings(precision="float8").precision == "auto"  # a damaged value falls back
    dialog = SettingsDialog(bf16, lambda target, draft: (True, "compatible"))
    qtbot.addWidget(dialog)
    assert dialog.precision.currentData() == "bfloat16" and "exact" in dialog.precision.toolTip()
    dialog.precision.setCurrentIndex(dialog.precision.findData("float32"))
    assert dialog.settings().precision == "float32"
    seen = []

    def fake_load_pair(target, draft, options, **_):
        seen.append(options)
        raise SpecchatError("stop here")

    monkeypatch.setattr("specchat.ui.session.load_pair", fake_load_pair)
    session = ChatSession(store, bf16, load_models=True)
    qtbot.waitUntil(lambda: not session.loading, timeout=20000)
    assert seen[0].dtype == "bfloat16" and seen[0].device == "auto"
    session.shutdown()


def test_a_target_that_is_not_exact_is_said_once_in_the_banner(make_window, tiny_pair):
    window = make_window()
    target = tiny_pair.target
    bf16 = LoadedModel(target.source, target.model, target.tokenizer, torch.device("cpu"), torch.bfloat16)
    pair = type(tiny_pair)(bf16, tiny_pair.draft)
    session = window.session
    session._on_loaded(pair, session._load_generation)
    assert window.banner.isVisible() and "bfloat16" in window.banner.label.text()
    assert "Settings → Precision" in window.banner.label.text() and session.error is None
    window.banner.hide()
    session.status_changed.emit()  # said once, not at every status change
    assert not window.banner.isVisible()
    assert "bfloat16" in session.status_text()  # and the status bar says which format runs


def test_no_banner_for_float32(make_window, tiny_pair):
    window = make_window()
    window.session._on_loaded(tiny_pair, window.session._load_generation)
    assert not window.banner.isVisible()


def test_the_settings_dialog_and_its_models_dialog_go_once_settings_has_run(qtbot, make_window, machine):
    """main_window.open_settings runs the dialog with exec: its settings are read after, then it is deleted, with
    the Models dialog it opened (which follows the session's downloads while it lives)."""
    import shiboken6
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    window = make_window(drafter="pld")
    opened = []

    def answer():
        dialog = QApplication.activeModalWidget()
        dialog.open_models()
        opened.extend((dialog, dialog.models_dialog))
        dialog.k.setValue(7)
        dialog.accept()

    QTimer.singleShot(0, answer)
    window.open_settings()
    assert isinstance(opened[0], SettingsDialog) and window.session.settings.k == 7  # read before it went
    qtbot.waitUntil(lambda: not any(shiboken6.isValid(widget) for widget in opened))
    assert not window.findChildren(SettingsDialog)


def test_a_model_counts_as_downloaded_once_refs_main_says_so(hf_cache):
    from specchat.models.hub.snapshots import downloaded_models

    place_in_cache(hf_cache, SMOLLM2_17B)
    assert list(downloaded_models()) == [SMOLLM2_17B]
    shutil.rmtree(hf_cache / f"models--{SMOLLM2_17B.replace('/', '--')}" / "refs")
    assert cached_snapshot(SMOLLM2_17B) is None  # without refs/main it is not a download to load


@pytest.mark.model
def test_a_downloaded_model_chats_with_the_embedded_draft_offline(qtbot, store, hf_cache):
    """The last step of the offline path: the window loads the cached model as target with the embedded model as
    its draft (both from disk, the network off) and replies with the draft model drafting."""
    from specchat.ui.main_window import MainWindow

    place_in_cache(hf_cache, SMOLLM2_17B)
    settings = AppSettings(target=SMOLLM2_17B, draft="embedded", drafter="model", max_new_tokens=12, k=3,
                           draft_from_history=False)
    session = ChatSession(store, settings)
    window = MainWindow(session)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: session.ready or session.error is not None or window.banner.isVisible(), timeout=90000)
    assert session.ready, window.banner.label.text()
    assert session.pair.draft.source.kind == "embedded" and session.pair.target.source.kind == "hub"
    window.composer.setPlainText("Say hello.")
    with qtbot.waitSignal(window.reply_finished, timeout=90000):
        window.send()
    reply = store.messages(window.conversation_id)[-1]
    assert reply.role == "assistant" and reply.text
    window.close()
