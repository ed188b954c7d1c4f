"""Python's cyclic garbage collector runs on the GUI thread only.

The collector runs in whichever thread happens to allocate when a generation's threshold is crossed: often the model
thread, which allocates all the time. If the garbage then holds Qt objects (a closed dialog and the lambdas
connected to its signals form a cycle), they are destroyed on the model thread, and Qt objects destroyed outside
their own thread crash the process (a segmentation fault, at whatever moment the collector happens to run). So
automatic collection is turned off and a timer on the GUI thread collects instead, each generation when its count
passes the same threshold the automatic collector would use (as pyqtgraph's GarbageCollector does).

The oldest generation follows CPython's own rule too: a pass over every object only once the objects added since
the last such pass are a quarter of those it left. A timer cannot read CPython's counts of those, so the survivors
of each pass over the oldest generation are frozen (gc.freeze: set aside, no longer scanned) and counted
(gc.get_freeze_count); the oldest generation then holds only what came since, and is collected alone, cheaply,
until it has grown to a quarter of what is frozen, when everything is thawed and collected once. Without the rule a
window holding a 150,000-message chat (about a million objects) stalled 110-130 ms at every collection (docs/
performance.md, "Large chats").
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
        gc.unfreeze()
        gc.collect()
        gc.enable()

    def collect_due(self) -> None:
        """Collects the oldest generation whose count is past its threshold (and with it the younger ones)."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.threshold[generation]:
                if generation == 2:
                    collect_oldest()
                else:
                    gc.collect(generation)
                return


def collect_oldest() -> None:
    """Collects the oldest generation: everything once what came since the last whole pass is a quarter of what it
    left (CPython's rule), else only what came since; then sets the survivors aside (the module's docstring)."""
    if len(gc.get_objects(generation=2)) * 4 > gc.get_freeze_count():
        gc.unfreeze()
    gc.collect(2)
    gc.freeze()
