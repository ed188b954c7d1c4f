"""Fixtures for tests of the window (tests/ui, tests/faults): a window on tiny models and a temporary database,
with QSettings kept out of the user's real settings. Each of those folders' conftest.py imports them."""

import pytest
import torch
from PySide6.QtCore import QCoreApplication, QSettings

from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource
from specchat.storage import Store, open_database


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, qapp):
    QCoreApplication.setOrganizationName("specchat-tests")
    QCoreApplication.setApplicationName("specchat-tests")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    yield


@pytest.fixture(autouse=True)
def garbage_collected_on_the_gui_thread(qapp):
    """As the app does (ui/gc_guard.py): no automatic collection during a test, which could run on a model thread
    and destroy Qt objects there; one collection on this thread after it."""
    import gc

    gc.disable()
    yield
    gc.collect()
    # What is left is alive: frozen, the next tests' collections skip it (a full collection over the models and
    # modules loaded by then took most of a second per test, most of the window tests' time)
    gc.freeze()
    gc.enable()


@pytest.fixture(autouse=True)
def job_threads_stopped(qapp):
    """Every session's threads are quit and waited for at teardown, whether or not a window closed them: a QThread
    left running would be destroyed while it runs."""
    from specchat.ui.workers import JobThread

    yield
    assert JobThread.stop_all(timeout_ms=60000) and not JobThread.running()


@pytest.fixture
def store(tmp_path):
    store = Store(open_database(tmp_path / "specchat.db"))
    yield store
    store.close()


@pytest.fixture(scope="session")
def endless_target(target):
    """The tiny target without an end-of-turn token, so that replies run to the token limit."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(target.config).eval()
    model.load_state_dict(target.state_dict())
    model.generation_config.eos_token_id = None
    return model


@pytest.fixture
def tiny_pair(endless_target):
    from tiny_models import build_byte_tokenizer

    tokenizer = build_byte_tokenizer(with_eos=False)

    def loaded(model):
        return LoadedModel(ModelSource("folder", "tiny-test-model"), model, tokenizer, torch.device("cpu"),
                           torch.float32)
    return ModelPair(loaded(endless_target), loaded(endless_target))  # its own draft: every proposal accepted


@pytest.fixture
def make_window(qtbot, store, tiny_pair):
    from specchat.ui.main_window import MainWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    windows = []

    def make(drafter="model", max_new_tokens=40, **settings):
        session = ChatSession(store, AppSettings(drafter=drafter, max_new_tokens=max_new_tokens, k=4,
                                                 adaptive_k=False, **settings), pair=tiny_pair)
        session.plain_tokens_per_s = 100.0
        window = MainWindow(session)
        qtbot.addWidget(window)
        window.resize(1000, 700)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()
