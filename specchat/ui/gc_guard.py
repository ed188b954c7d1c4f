"""Python's cyclic garbage collector runs on the GUI thread only.

The collector runs in whichever thread happens to allocate when a generation's threshold is crossed: often the model
thread, which allocates all the time. If the garbage then holds Qt objects (a closed dialog and the lambdas
connected to its signals form a cycle), they are destroyed on the model thread, and Qt objects destroyed outside
their own thread crash the process (a segmentation fault, at whatever moment the collector happens to run). So
automatic collection is turned off and a timer on the GUI thread collects instead, each generation when its count
passes the same threshold the automatic collector would use (as pyqtgraph's GarbageCollector does).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 1000


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS):
        super().__init__(parent)
        self.threshold = gc.get_threshold()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect_due)
        self.timer.setInterval(interval_ms)

    def start(self) -> GuiThreadCollector:
        gc.disable()
        self.timer.start()
        return self

    def stop(self) -> None:
        self.timer.stop()
        gc.collect()
        gc.enable()

    def collect_due(self) -> None:
        """Collects the oldest generation whose count is past its threshold (and with it the younger ones)."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.threshold[generation]:
                gc.collect(generation)
                return
