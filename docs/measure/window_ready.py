"""Spawn to ready for the desktop window, through its real entry point (`specchat-gui`: commands/app.run_window):
the seconds from the process's start to the first moment the chat session can answer (the model loaded), printed,
then the process exits. docs/performance.md, "Launch".

    for i in 1 2 3; do for m in "" --before; do xvfb-run -a .venv/bin/python docs/measure/window_ready.py $m; done; done

--before: the launch as it was before its imports were ordered and the collector set (run_gui called directly).

Run with a data folder of its own (SPECCHAT_DATA_DIR) for a first launch's database. The only thing added to the
real launch is an import hook that, once `specchat.ui.session` is imported, has ChatSession report when it is ready.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import time

def process_start() -> float:
    """The wall-clock time this process started (Linux: /proc/self/stat's start time in clock ticks since boot)."""
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = float(open("/proc/uptime").read().split()[0])
    return time.time() - boot + ticks / os.sysconf("SC_CLK_TCK")


class ReportWhenReady(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds specchat.ui.session as usual, then wraps ChatSession so that its first ready status prints and exits."""

    def find_spec(self, name, path, target=None):
        if name != "specchat.ui.session":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        self.real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        original = module.ChatSession.__init__

        def init(session, *args, **kwargs):
            original(session, *args, **kwargs)

            def check() -> None:
                if session.ready:
                    print(f"ready {time.time() - process_start():.3f} s after the process started", flush=True)
                    os._exit(0)
                if session.error:
                    print(f"error: {session.error}", flush=True)
                    os._exit(1)

            session.status_changed.connect(check)

        module.ChatSession.__init__ = init


sys.meta_path.insert(0, ReportWhenReady())
if "--before" in sys.argv:  # the launch before the import order and the collector's setting (for a side-by-side run)
    from specchat.ui.app import run_gui  # noqa: E402

    sys.exit(run_gui())
from specchat.commands.app import run_window  # noqa: E402

sys.exit(run_window())
