"""Where llama.cpp runs a GGUF file's layers: on the CPU, or offloaded to a GPU that llama.cpp was built for (CUDA,
Vulkan, Metal), all of them or as many as fit in the device's free memory.

llama.cpp decides per layer: with `n_gpu_layers` = n, the last n of the file's n_layer + 1 layers (the repeating
blocks, then the output head) live on the GPU and the rest on the CPU; -1 means all of them. Which devices exist is
ggml's device registry (a build without a GPU backend has only the CPU; a Vulkan build on a machine without a
visible Vulkan GPU has none either). This module reads that registry through ctypes (llama-cpp-python binds only
llama.h), plans how many layers to offload from the device's free memory, and keeps what llama.cpp's log says it
did ("offloaded 31/31 layers to GPU"), so that what the app reports is what llama.cpp did, not what was asked.

The choice, in order: LoadOptions.gpu_layers, else $SPECCHAT_GPU_LAYERS (-1 all, 0 none, n), else "auto": every
layer when they fit in the device's free memory with room for the KV cache and llama.cpp's buffers, as many as fit
otherwise, none on a build or machine without a GPU. No torch here: a CUDA device's free memory comes from
llama.cpp, else from nvidia-smi.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from specchat.core.errors import ModelLoadError

GPU_LAYERS_ENV = "SPECCHAT_GPU_LAYERS"
ALL_LAYERS = -1
DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}  # enum ggml_backend_dev_type
RESERVE_BYTES = 512 << 20  # llama.cpp's compute buffers and the driver's own, kept free beside the weights
PLAN_CONTEXT = 4096  # positions of KV cache counted when planning (contexts grow in steps; engine/backends/llamacpp/llama_runner.py)
KV_BYTES = 2  # the runner's bfloat16 KV cache (engine/backends/llamacpp/llama_runner.py)
_OFFLOADED = re.compile(rb"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(rb"^\s*\S+: +(\S+) model buffer size = +([\d.]+) MiB")


@dataclass(frozen=True)
class LlamaDevice:
    """One device in ggml's registry, as llama.cpp sees it."""

    name: str  # "CPU", "Vulkan0", "CUDA0", "MTL0"
    description: str  # "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA GeForce RTX 4090"
    kind: str  # "cpu", "gpu", "igpu", "accel"
    backend: str  # the backend's registry name: "CPU", "Vulkan", "CUDA", "Metal"
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu")

    def describe(self) -> str:
        """"Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)), 23.4 GB free" for the user."""
        from specchat.core.formatting import format_size

        memory = f", {format_size(self.free_bytes)} free" if self.total_bytes else ""
        return f"{self.name} ({self.description}){memory}"


@dataclass(frozen=True)
class Placement:
    """Where a loaded file's layers are: `layers` of `of_layers` on `device` (None: all on the CPU)."""

    layers: int
    of_layers: int
    device: str | None = None  # the GPU's name ("Vulkan0") when any layer is on it
    backend: str | None = None  # its backend ("Vulkan")

    @property
    def offloaded(self) -> bool:
        return self.layers > 0 and self.device is not None

    def describe(self) -> str:
        """"Vulkan0, 31/31 layers" or "CPU": where the model runs, for the status bar and the self-test."""
        if not self.offloaded:
            return "CPU"
        return f"{self.device}, {self.layers}/{self.of_layers} layers"

    @property
    def key(self) -> str:
        """What a kernel verdict depends on besides the file and build (engine/backends/llamacpp/kernels.py): "" on the CPU."""
        return f"{self.backend}:{self.device}:{self.layers}/{self.of_layers}" if self.offloaded else ""


def _ggml(llama):
    """ggml's shared library (its device registry), through llama-cpp-python's loaded libllama where the platform
    resolves ggml's symbols through it, else the libggml beside it."""
    lib = llama.llama_cpp._lib
    if not hasattr(lib, "ggml_backend_dev_count"):
        folder = Path(llama.__file__).parent / "lib"
        name = {"win32": "ggml.dll", "darwin": "libggml.dylib"}.get(sys.platform, "libggml.so")
        lib = ctypes.CDLL(str(folder / name))
    for function, restype, argtypes in (
            ("ggml_backend_dev_count", ctypes.c_size_t, []),
            ("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p]),
            ("ggml_backend_dev_memory", None,
             [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
            ("ggml_backend_dev_backend_reg", ctypes.c_void_p, [ctypes.c_void_p]),
            ("ggml_backend_reg_count", ctypes.c_size_t, []),
            ("ggml_backend_reg_get", ctypes.c_void_p, [ctypes.c_size_t]),
            ("ggml_backend_reg_name", ctypes.c_char_p, [ctypes.c_void_p])):
        getattr(lib, function).restype = restype
        getattr(lib, function).argtypes = argtypes
    return lib


def llama_devices(llama) -> list[LlamaDevice]:
    """Every device llama.cpp can run on here (the CPU first), with its free and total memory. `llama`: the
    llama_cpp module, its backend initialised (engine/backends/llamacpp/llama_runner.py's _llama)."""
    lib = _ggml(llama)
    devices = []
    for index in range(lib.ggml_backend_dev_count()):
        device = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        devices.append(LlamaDevice(
            name=(lib.ggml_backend_dev_name(device) or b"?").decode(errors="replace"),
            description=(lib.ggml_backend_dev_description(device) or b"").decode(errors="replace"),
            kind=DEVICE_KINDS.get(lib.ggml_backend_dev_type(device), "other"),
            backend=(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(device)) or b"?").decode(),
            free_bytes=int(free.value), total_bytes=int(total.value)))
    return devices


def built_backends(llama) -> list[str]:
    """The backends this llama.cpp was built with ("CPU", "Vulkan", ...), whether or not they found a device."""
    lib = _ggml(llama)
    return [(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"?").decode()
            for i in range(lib.ggml_backend_reg_count())]


def requested_layers(setting: int | None = None) -> int | None:
    """How many layers the user asked to offload: `setting` (LoadOptions.gpu_layers), else $SPECCHAT_GPU_LAYERS;
    -1 all, 0 none, n; None: decide from free memory. A value that is not a whole number >= -1 is a ModelLoadError
    naming it."""
    if setting is not None:
        raw, where = str(setting), "gpu_layers"
    else:
        raw, where = os.environ.get(GPU_LAYERS_ENV, "").strip(), GPU_LAYERS_ENV
        if raw.lower() in ("", "auto"):
            return None
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if value < ALL_LAYERS:
        raise ModelLoadError(f"{where}={raw!r} is not a layer count: use -1 (all layers on the GPU), 0 (none), "
                             "a number of layers, or auto")
    return value


def plan_layers(requested: int | None, n_layers: int, file_bytes: int, free_bytes: int | None,
                kv_bytes_per_layer: int) -> int:
    """The n_gpu_layers to load with. Takes the request (requested_layers), the file's repeating layers, its size,
    the GPU's free memory (None: unknown) and the KV cache's bytes per layer at PLAN_CONTEXT; returns -1 (all),
    0 or a count of n_layers + 1 at most. Auto: all layers when the weights, their KV cache and RESERVE_BYTES fit
    in the free memory; else as many as fit, each costing its share of the file and its KV cache; all when the
    free memory is unknown (llama.cpp then fails loudly rather than silently running on the CPU)."""
    if requested is not None:
        return ALL_LAYERS if requested < 0 or requested > n_layers else requested
    if free_bytes is None or free_bytes <= 0:
        return ALL_LAYERS
    per_layer = file_bytes / (n_layers + 1) + kv_bytes_per_layer
    fits = int(max(0, free_bytes - RESERVE_BYTES) // max(per_layer, 1))
    return ALL_LAYERS if fits > n_layers else fits


def offload_target(llama) -> LlamaDevice | None:
    """The device llama.cpp offloads to by default (its first GPU, else its first integrated GPU), or None."""
    devices = [d for d in llama_devices(llama) if d.is_gpu]
    gpus = [d for d in devices if d.kind == "gpu"]
    return (gpus or devices or [None])[0]


def free_memory(device: LlamaDevice) -> int | None:
    """The device's free memory: ggml's figure, else (a CUDA device reporting none) nvidia-smi's, else None."""
    if device.free_bytes > 0:
        return device.free_bytes
    if device.backend == "CUDA":
        return nvidia_free_bytes()
    return None


def nvidia_free_bytes() -> int | None:
    """The first NVIDIA GPU's free memory from nvidia-smi, or None where it does not answer."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.split()[0]) << 20
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class LoadLog:
    """What llama.cpp's log said while a model loaded: the offloaded layers and the buffers the weights went to.
    engine/backends/llamacpp/library.py's log callback feeds `line` while one is being recorded."""

    def __init__(self):
        self.offloaded: tuple[int, int] | None = None
        self.buffers: dict[str, float] = {}  # buffer name ("Vulkan0", "CPU_Mapped") -> MiB

    def line(self, text: bytes) -> None:
        found = _OFFLOADED.search(text)
        if found:
            self.offloaded = (int(found.group(1)), int(found.group(2)))
        buffer = _BUFFER.search(text)
        if buffer:
            name = buffer.group(1).decode(errors="replace")
            self.buffers[name] = self.buffers.get(name, 0.0) + float(buffer.group(2))

    def placement(self, device: LlamaDevice | None, n_layers: int) -> Placement:
        """Where the layers went, by the log: the offloaded count when a buffer of the device holds weights, else
        all on the CPU."""
        if device is None or self.offloaded is None or self.offloaded[0] == 0:
            return Placement(0, n_layers + 1)
        if not any(name.startswith(device.name) for name in self.buffers):
            return Placement(0, n_layers + 1)
        return Placement(self.offloaded[0], self.offloaded[1], device.name, device.backend)
