"""Moving tokens between the host and the device without making the host wait, and counting where it still waits.

On a GPU the host queues kernels and runs ahead; it waits ("synchronises") whenever it reads a value the device
computes (`.item()`, `.tolist()`, `int(t)`, `bool(t)`, `.cpu()`), and whenever it copies Python data into device
memory the plain way (`torch.tensor(data, device=...)` copies from pageable memory, which waits for the stream).
A speculative step needs the accepted tokens on the host once, to show them; every other wait is lost time. So:

- `HostToDevice` puts small token lists on the device through one pinned staging buffer with a non-blocking copy
  (no wait; on the CPU it is a plain tensor);
- `HostSyncCounter` counts, as a context manager, every read of a tensor's value into Python and every tensor
  built from Python data outside `HostToDevice`: on a GPU each one is a wait, on the CPU each one marks the place
  where a GPU would wait. `specchat gpu-check` and the tests count with it, per speculative step.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode, _pop_mode_temporarily

# The Tensor methods that read a value into Python: each makes the host wait for the device.
_READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__bool__,
          torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.cpu, torch.Tensor.numpy}
# Tensors built from Python data: a pageable host-to-device copy, which waits for the stream on a GPU.
_BUILDS = {torch.tensor, torch.as_tensor}

_quiet = threading.local()  # set while HostToDevice copies: its copies do not wait
_active = threading.local()  # how many HostSyncCounters are active on this thread


class HostSyncCounter(TorchFunctionMode):
    """Counts host synchronisations (reads of device values, tensors built from Python data) on this thread while
    active: `with HostSyncCounter() as syncs: ...; syncs.count`. `where` keeps the names of what was counted, for a
    report that says which call waited."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.where: dict[str, int] = {}

    def __enter__(self):
        _active.counters = getattr(_active, "counters", 0) + 1
        return super().__enter__()

    def __exit__(self, *exc):
        _active.counters -= 1
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _READS or (func in _BUILDS and not getattr(_quiet, "on", False)):
            self.count += 1
            name = getattr(func, "__name__", str(func))
            self.where[name] = self.where.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@contextmanager
def uncounted() -> Iterator[None]:
    """Runs a compiled call with no HostSyncCounter active: dynamo guards on the torch-function mode stack, so a
    graph compiled at load, called under a counter, would be compiled again. (What a compiled graph does inside is
    checked by dynamo's own graph-break count, and on a GPU by CUDA's sync debug mode.)"""
    if not getattr(_active, "counters", 0) or not isinstance(_current_mode(), HostSyncCounter):
        yield
        return
    with _pop_mode_temporarily():
        yield


def _current_mode():
    depth = torch._C._len_torch_function_stack()
    return torch._C._get_function_stack_at(depth - 1) if depth else None


class HostToDevice:
    """Small lists of token ids onto `device` without a wait: written into a pinned host ring buffer, then copied
    with non_blocking=True into a fresh device tensor. Each call takes the ring's next free slots, so a copy still
    in flight is never overwritten: the engine reads each step's result (one wait, after which every earlier copy
    is done) long before the ring comes round again. On the CPU it returns a plain tensor (nothing to wait for)."""

    def __init__(self, device: torch.device, capacity: int = 8192):
        self.device = torch.device(device)
        self._pinned = self.device.type == "cuda"
        self._ring = torch.empty(capacity if self._pinned else 0, dtype=torch.long, pin_memory=self._pinned)
        self._next = 0

    def tokens(self, ids) -> torch.Tensor:
        """The ids (a list of ints) as a 1-D long tensor on the device."""
        ids = list(ids)
        _quiet.on = True
        try:
            if not self._pinned or len(ids) > self._ring.numel():
                return torch.tensor(ids, dtype=torch.long, device=self.device)
            if self._next + len(ids) > self._ring.numel():
                self._next = 0
            staged = self._ring[self._next: self._next + len(ids)]
            self._next += len(ids)
            staged.copy_(torch.tensor(ids, dtype=torch.long))
            return staged.to(self.device, non_blocking=True)
        finally:
            _quiet.on = False
