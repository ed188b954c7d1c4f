"""One process: the real window (offscreen) on the default pair, plain decoding, one prompt answered N times; prints
each reply's tokens/s (new tokens / wall, the engine's own clock in the model thread, prompt included)."""
import json
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

from specchat.storage import Store, open_database
from specchat.ui.main_window import MainWindow
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings

prompt, repeats, drafter = sys.argv[1], int(sys.argv[2]), sys.argv[3]
app = QApplication([])
store = Store(open_database(Path(tempfile.mkdtemp()) / "db.sqlite"))
session = ChatSession(store, AppSettings(drafter=drafter, max_new_tokens=128))
window = MainWindow(session); window.resize(1000, 700); window.show()
loop = QEventLoop()
def wait_loaded():
    if session.pair is not None and not session.loading: loop.quit()
    else: QTimer.singleShot(100, wait_loaded)
QTimer.singleShot(100, wait_loaded); loop.exec()
window.reply_finished.connect(loop.quit)
seen = []
on_finished = window._on_finished
window._on_finished = lambda result: (seen.append(result), on_finished(result))
for _ in range(repeats):
    window.new_conversation()  # each reply in a fresh chat, as the bench's single-turn prompt
    window.composer.setPlainText(prompt)
    window.send()
    loop.exec()
print(json.dumps([round(len(r.token_ids) / r.stats.wall_s, 2) for r in seen]))
window.close()
