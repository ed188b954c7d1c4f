"""A real specchat window (offscreen) streaming an endless reply into the database at argv[1]; prints SAVED once the
partial reply is on disk, then runs until it is killed. Used by test_kill.py, which kills it with SIGKILL: the reply
is the newest chat's last one regenerated (a new branch, sampled)."""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_models

import torch  # noqa: E402
from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tiny_models import build_byte_tokenizer, build_tiny_llama  # noqa: E402

from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair  # noqa: E402
from specchat.models.sources import ModelSource  # noqa: E402
from specchat.storage import Store, open_database  # noqa: E402
from specchat.ui.main_window import MainWindow  # noqa: E402
from specchat.ui.session import ChatSession  # noqa: E402
from specchat.ui.settings import AppSettings  # noqa: E402


def slowed(stream):
    """The engine's steps, 50 ms apart: the tiny model would otherwise fill its 512-token window in about a
    second, and the reply would end on its own before the kill."""
    import time

    def paced(self, *args, **kwargs):
        for event in stream(self, *args, **kwargs):
            time.sleep(0.05)
            yield event
    return paced


def main() -> None:
    from specchat.engine.decoding.speculative import SpeculativeEngine

    SpeculativeEngine.stream = slowed(SpeculativeEngine.stream)
    app = QApplication([])
    tokenizer = build_byte_tokenizer(with_eos=False)
    model = build_tiny_llama(len(tokenizer), seed=0)
    model.generation_config.eos_token_id = None  # no end of turn: the reply runs until the process is killed
    loaded = LoadedModel(ModelSource("folder", "tiny"), model, tokenizer, torch.device("cpu"), torch.float32)
    store = Store(open_database(Path(sys.argv[1])))
    settings = AppSettings(drafter="model", max_new_tokens=100_000, k=4, adaptive_k=False, draft_from_history=False)
    session = ChatSession(store, settings, pair=ModelPair(loaded, loaded))
    session.plain_tokens_per_s = 100.0
    window = MainWindow(session)
    window.open_conversation(store.list_conversations()[0].id)
    window.regenerate()

    def report_when_saved() -> None:
        replies = [m for m in store.messages(window.conversation_id) if m.role == "assistant"]
        if replies and len(replies[-1].text) > 20:
            print("SAVED", len(replies[-1].text), flush=True)
            timer.stop()

    timer = QTimer(interval=100, timeout=report_when_saved)
    timer.start()
    app.exec()


if __name__ == "__main__":
    main()
