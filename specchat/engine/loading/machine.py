"""What this machine offers a model (models/catalog/fit.py's Machine): the device Settings' choice resolves to, its
free memory, the CPU's bfloat16 support, and whether llama.cpp is installed and offloads to a GPU. Found here, on
the engine's side, because finding them asks torch and llama.cpp; the catalog's judgement of what fits stays
torch-free."""

from __future__ import annotations

import torch

from ...core.accelerators import cpu_has_native_bf16
from ...core.errors import SpecchatError
from ...models.catalog import entries as cat
from ...models.catalog.fit import Machine
from ..backends.llamacpp.library import _llama, llama_cpp_available
from ..backends.llamacpp.offload import free_memory, offload_target
from .load import choose_device, choose_dtype


def machine_here(device_setting: str = "auto") -> Machine:
    """The device Settings' choice resolves to (auto where it cannot be had), its free memory (a GPU's own), the
    CPU's bfloat16 support, whether llama.cpp is installed, and the float format a GPU would use
    (engine/loading/load.py's choose_dtype)."""
    try:
        device = choose_device(device_setting)
    except SpecchatError:  # e.g. CUDA chosen on a machine without it: Settings says so when loading
        device = choose_device("auto")
    if device.type == "cuda":
        available = int(torch.cuda.mem_get_info(device)[0])
    else:
        available = cat.available_memory_bytes()
    gpu_format = cat.dtype_name(str(choose_dtype(device)).removeprefix("torch.")) if device.type != "cpu" else "bf16"
    llama = llama_cpp_available()
    llama_gpu = _llama_gpu_bytes() if llama and device_setting != "cpu" else None
    return Machine(device.type, available, cpu_has_native_bf16(), llama, gpu_format, llama_gpu)


def _llama_gpu_bytes() -> int | None:
    """The free memory of the GPU that llama.cpp offloads to (engine/backends/llamacpp/offload.py), None where it offloads nowhere;
    0 where the device does not say (the file is then taken to fit: llama.cpp offloads it, or says it cannot)."""
    llama = _llama()
    if not llama.llama_supports_gpu_offload():
        return None
    target = offload_target(llama)
    return None if target is None else (free_memory(target) or 0)
