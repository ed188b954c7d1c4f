"""What this installation was built with and what it can use: llama.cpp's backends and devices, torch's CUDA or MPS,
and the GPUs the machine has (specchat/core/accelerators.py). `specchat --self-test`, Help → About, Settings → Device and
the window's banner read it, so that a GPU that is here but unused is said, with the reason and the fix.

No Qt. torch is imported inside the functions (it is loaded by then wherever this is called). The probe of the
machine runs subprocesses (nvidia-smi, vulkaninfo), so `build_report` is cached: the window asks for it on its model
thread while loading, and reads it again on the GUI thread for free.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from specchat.core.accelerators import Found, cmake_args, is_cpu_build, probe, why_cpu_build

from .offload import LlamaDevice

REBUILD = "`make clean && make setup`"


@dataclass(frozen=True)
class BuildReport:
    """llama.cpp's and torch's builds, their devices, and the machine's GPUs."""

    found: Found
    llama_version: str | None  # None: llama-cpp-python is not installed
    llama_backends: tuple[str, ...] = ()  # built: "CPU", "Vulkan", "CUDA", "Metal"
    llama_gpu_offload: bool = False  # llama_supports_gpu_offload(): a GPU backend with a device
    llama_devices: tuple[LlamaDevice, ...] = ()
    torch_version: str = ""
    torch_cuda: str | None = None  # the CUDA version torch was built with
    torch_gpus: tuple[str, ...] = ()  # "cuda:0 NVIDIA …", "mps"

    def llama_line(self) -> str:
        """"llama.cpp 0.3.36: CPU + Vulkan, offloads to Vulkan0 (…)" or why it does not."""
        if self.llama_version is None:
            return "llama.cpp: not installed (GGUF files run on torch's float copy)"
        gpus = [d.describe() for d in self.llama_devices if d.is_gpu]
        where = f"offloads to {'; '.join(gpus)}" if self.llama_gpu_offload and gpus else "CPU only"
        return f"llama.cpp {self.llama_version}: built with {' + '.join(self.llama_backends) or 'CPU'}, {where}"

    def torch_line(self) -> str:
        """"torch 2.13.0: CPU build" or "torch 2.11.0+cu130: CUDA 13.0, cuda:0 NVIDIA H200"."""
        kind = f"CUDA {self.torch_cuda}" if self.torch_cuda else "CPU build"
        return f"torch {self.torch_version}: {kind}" + (f", {', '.join(self.torch_gpus)}" if self.torch_gpus else "")

    def unused_gpu(self) -> list[str]:
        """A sentence for each accelerator that is here but that a build cannot use, with the reason and the fix."""
        notes = []
        found = self.found
        if found.nvidia_gpus and not self.torch_cuda:
            notes.append(f"{', '.join(found.nvidia_gpus)} is here but torch is a CPU build, so models that run on "
                         f"torch stay on the CPU: {REBUILD} installs torch's CUDA build (or set TORCH_SPEC)")
        if found.has_gpu and self.llama_version is not None and not self.llama_gpu_offload:
            notes.append(self._llama_fix())
        return notes

    def _llama_fix(self) -> str:
        gpu_backends = [b for b in self.llama_backends if b not in ("CPU", "BLAS", "RPC")]
        if gpu_backends:
            return (f"{self.found.gpu_names()} is here, but llama.cpp (built with {', '.join(gpu_backends)}) "
                    "finds no device it can use, so GGUF models run on the CPU: check the GPU's driver")
        wanted = cmake_args(self.found)
        if is_cpu_build(wanted):
            return f"llama.cpp runs GGUF models on the CPU: {why_cpu_build(self.found)}"
        return (f"{self.found.gpu_names()} is here but llama.cpp was built for the CPU only, so GGUF models run on "
                f"the CPU: {REBUILD} builds it with CMAKE_ARGS={wanted}")

    def lines(self) -> list[str]:
        """The whole report, a line each, the unused GPUs last."""
        return [self.llama_line(), self.torch_line()] + [f"note: {note}" for note in self.unused_gpu()]


@functools.lru_cache(maxsize=1)
def build_report() -> BuildReport:
    """The report for this process (probed once; llama.cpp's backend is initialised if it is installed)."""
    import torch

    torch_gpus: list[str] = []
    if torch.cuda.is_available():
        torch_gpus = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        torch_gpus = ["mps"]
    torch_part = dict(torch_version=torch.__version__, torch_cuda=torch.version.cuda, torch_gpus=tuple(torch_gpus))
    from .library import _llama, llama_cpp_available
    from .offload import built_backends, llama_devices

    if not llama_cpp_available():
        return BuildReport(found=probe(), llama_version=None, **torch_part)
    llama = _llama()
    return BuildReport(found=probe(), llama_version=llama.__version__,
                       llama_backends=tuple(built_backends(llama)),
                       llama_gpu_offload=bool(llama.llama_supports_gpu_offload()),
                       llama_devices=tuple(llama_devices(llama)), **torch_part)


def where_models_run(pair) -> str:
    """"target: llama.cpp, Vulkan0, 31/31 layers, …; draft: cpu, float32" for a loaded ModelPair."""
    parts = [f"target: {pair.target.runs_on}"]
    if pair.draft is not None:
        parts.append(f"draft: {pair.draft.runs_on}")
    return "; ".join(parts)
