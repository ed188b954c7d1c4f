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


class Node:
    pass


def test_the_oldest_generation_is_collected_whole_only_once_it_grew_by_a_quarter():
    """CPython's rule, kept by a collector on a timer: a cycle among long-lived objects waits for the next whole
    pass, which comes once the newcomers are a quarter of the objects the last one left."""
    import weakref

    from specchat.ui.gc_guard import collect_oldest

    gc.unfreeze()
    try:
        held = [[index] for index in range(50_000)]  # long-lived objects, as a large chat's messages
        node = Node()
        node.me = node
        gone = weakref.ref(node)
        collect_oldest()  # a whole pass: the survivors (the node among them) are set aside
        assert gc.get_freeze_count() >= len(held)
        del node  # now garbage, in a cycle among the set-aside objects
        collect_oldest()  # few newcomers: they alone are scanned
        assert gone() is not None
        more = [[index] for index in range(gc.get_freeze_count() // 3)]  # the heap grew by a third
        gc.collect(1)  # (the newcomers move into the oldest generation)
        collect_oldest()
        assert gone() is None and len(more) and len(held)  # a whole pass again: the cycle is freed
    finally:
        gc.unfreeze()
