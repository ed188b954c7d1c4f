"""The llama.cpp library through llama-cpp-python: found, initialised once per process, its log kept to errors (and
to the lines a load reports: where its layers went), the thread count, and the GPU layers a file is loaded with.

Why a module of its own: the loaders, the machine report, the benchmark's peers and the runner all need the library
and its settings, and none of them needs the runner (llama_runner.py).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading
from pathlib import Path

from specchat.core.errors import ModelLoadError
from specchat.core.machine_load import usable_cores

from ...loading.gguf_header import layer_shape
from .offload import KV_BYTES, PLAN_CONTEXT, LoadLog, built_backends, free_memory, offload_target, plan_layers, \
    requested_layers

log = logging.getLogger(__name__)

INSTALL_HINT = ('pip install "llama-cpp-python==0.3.36" (builds llama.cpp from source: about 3-4 minutes on two '
                'cores; `make setup` does it)')

def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def default_threads() -> int:
    """SPECCHAT_THREADS, else every core this process may run on (llama.cpp's own default is the physical cores;
    on a machine without SMT the two agree)."""
    configured = os.environ.get("SPECCHAT_THREADS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return usable_cores()


_backend_lock = threading.Lock()
_backend_ready = False


def _llama():
    """The llama_cpp module, its backend initialised once per process, and its log quietened."""
    global _backend_ready
    if not llama_cpp_available():
        raise ModelLoadError(f"the llama.cpp backend is not installed; {INSTALL_HINT}")
    import llama_cpp

    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _quiet_log(llama_cpp)
            _backend_ready = True
    return llama_cpp


_recording: LoadLog | None = None  # the load whose log lines are being kept (one load at a time: _load_lock)
_load_lock = threading.Lock()


def _log_errors_only(level: int, text: bytes, user_data) -> None:
    """llama.cpp's log callback: errors go to our log; every line goes to the load being recorded, if any."""
    if _recording is not None and text:
        _recording.line(text)
    if level == 4 and text:  # GGML_LOG_LEVEL_ERROR; llama.cpp's information and debug lines are not for users
        log.error("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())


_log_callback = None  # kept alive for as long as llama.cpp may call it


def _quiet_log(llama_cpp) -> None:
    global _log_callback
    _log_callback = llama_cpp.llama_log_callback(_log_errors_only)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def _load_recording(llama, path: Path, params) -> tuple[object, LoadLog]:
    """llama_model_load_from_file, with what llama.cpp's log said meanwhile (where the layers went)."""
    global _recording
    with _load_lock:
        _recording = LoadLog()
        try:
            return llama.llama_model_load_from_file(str(path).encode(), params), _recording
        finally:
            _recording = None


def gpu_layers_for(path: Path, device: str | None = None, requested: int | None = None) -> tuple[int, str]:
    """The n_gpu_layers to load `path` with, and the part of a kernel verdict's key it makes (offload.Placement.key
    before the load: "" on the CPU). Takes the device setting (LoadOptions.device: "cpu" keeps every layer on the
    CPU) and the requested count (LoadOptions.gpu_layers, else $SPECCHAT_GPU_LAYERS; offload.requested_layers).
    With no GPU that llama.cpp can use, 0; else offload.plan_layers from the device's free memory."""
    llama = _llama()
    wanted = requested_layers(requested)
    if (device or "auto") == "cpu" or wanted == 0 or not llama.llama_supports_gpu_offload():
        return 0, ""
    target = offload_target(llama)
    if target is None:
        return 0, ""
    n_layers, kv_per_layer = _kv_bytes_per_layer(path)
    layers = plan_layers(wanted, n_layers, path.stat().st_size, free_memory(target), kv_per_layer)
    key = f"{target.backend}:{target.name}:{layers}" if layers else ""
    return layers, key


def why_no_gpu_offload() -> str | None:
    """None where this llama.cpp can put layers on a GPU here; else why not and what to do, for the user."""
    llama = _llama()
    if llama.llama_supports_gpu_offload():
        return None
    gpu_backends = [name for name in built_backends(llama) if name not in ("CPU", "BLAS", "RPC")]
    if gpu_backends:
        hidden = (" (llama.cpp uses a software Vulkan device such as lavapipe only when GGML_VK_VISIBLE_DEVICES "
                  "names it)" if "Vulkan" in gpu_backends else "")
        return f"llama.cpp was built with {', '.join(gpu_backends)} but finds no GPU here{hidden}"
    from specchat.core.accelerators import cmake_args, is_cpu_build, probe

    wanted = cmake_args(probe(full=False))
    fix = (f"rebuild it with `make clean && make setup` (which builds with CMAKE_ARGS={wanted} here)"
           if not is_cpu_build(wanted) else "rebuild it with CMAKE_ARGS=-DGGML_CUDA=ON, -DGGML_VULKAN=ON or "
           "-DGGML_METAL=ON for your GPU (docs/gpu.md)")
    return f"llama.cpp was built for the CPU only; {fix}"


def _kv_bytes_per_layer(path: Path) -> tuple[int, int]:
    """(repeating layers, KV cache bytes per layer at offload.PLAN_CONTEXT) of a GGUF file, from its header alone
    (engine/loading/gguf_header.py)."""
    n_layers, kv_heads, head_size = layer_shape(path)
    return n_layers, 2 * PLAN_CONTEXT * kv_heads * head_size * KV_BYTES
