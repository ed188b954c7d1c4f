"""Garbage that holds Qt objects is collected on the GUI thread, never on a thread that happens to allocate."""

import gc
import threading

from PySide6.QtCore import QObject

from specchat.ui.gc_guard import GuiThreadCollector


def test_a_qt_object_in_a_cycle_dies_on_the_gui_thread(qtbot):
    gc.enable()  # as at the start of the app: the collector is what turns automatic collection off
    collector = GuiThreadCollector(interval_ms=10).start()
    destroyed = []
    try:
        holder = QObject()
        holder.me = holder  # a reference cycle: only the cyclic collector frees it
        holder.destroyed.connect(lambda: destroyed.append(threading.current_thread().name))
        del holder
        kept = []  # kept alive: the collector counts objects allocated and not yet freed, as Python's does
        allocating = threading.Thread(target=lambda: kept.extend([index] for index in range(200_000)),
                                      name="model-thread")
        allocating.start()
        allocating.join()
        assert destroyed == []  # the allocating thread did not collect
        qtbot.waitUntil(lambda: destroyed == [threading.main_thread().name], timeout=10000)
    finally:
        collector.stop()
    assert gc.isenabled()
