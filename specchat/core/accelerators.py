"""Which accelerators this machine has, and what setup builds for them. Standard library only: the Makefile runs
this file with the system's python3 before the venv exists, and the app reads the same probe to say when a GPU is
here but unused (engine/backends/llamacpp/built.py).

    python3 specchat/core/accelerators.py --cmake-args            # llama.cpp's CMAKE_ARGS for this machine
    python3 specchat/core/accelerators.py --cpu-cmake-args        # the same for its CPU alone (`make peers`)
    python3 specchat/core/accelerators.py --torch-spec SPEC --cuda-index URL   # SPEC, from URL/cuXYZ where an NVIDIA GPU is
    python3 specchat/core/accelerators.py                         # what it found, in words
    python3 specchat/core/accelerators.py --record FILE --stamp STAMP --torch-spec SPEC ...   # what `make setup` uses

llama.cpp's backend, in order: an NVIDIA GPU (nvidia-smi answers) with the CUDA compiler (nvcc) → CUDA; a GPU that
Vulkan sees (an NVIDIA GPU without nvcc included) with Vulkan's build tools (its headers, SPIR-V headers and glslc)
→ Vulkan; macOS on Apple silicon → Metal; otherwise the CPU build for this CPU (GGML_NATIVE), without llama.cpp's
AMX kernels on a CPU that has AMX (CPU_NO_AMX_ARGS: they crash, docs/exactness.md "A CPU with AMX"). A Vulkan device of
type CPU (Mesa's lavapipe, a software renderer) is no GPU: it would make every pass slower than the CPU backend.
torch: its CUDA build where an NVIDIA GPU is (from PyTorch's index for the CUDA version the driver supports), the
given spec otherwise, so a machine without an NVIDIA GPU never downloads CUDA.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CPU_ARGS = "-DGGML_NATIVE=ON"
# -march=native compiles llama.cpp's AMX kernels in on a CPU with AMX (Sapphire Rapids and later), and their matrix
# product crashes (SIGSEGV in ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824). Built without them, such a CPU
# keeps llama.cpp's other repacked kernels (AVX-512, AVX2). GCC and Clang honour an explicit -mno-amx-int8 wherever
# it stands beside -march=native.
CPU_NO_AMX_ARGS = f"{CPU_ARGS} -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"
CUDA_ARGS = "-DGGML_CUDA=ON"
VULKAN_ARGS = "-DGGML_VULKAN=ON"
METAL_ARGS = "-DGGML_METAL=ON"
BACKEND_OF_ARGS = {CUDA_ARGS: "CUDA", VULKAN_ARGS: "Vulkan", METAL_ARGS: "Metal", CPU_ARGS: "CPU",
                   CPU_NO_AMX_ARGS: "CPU"}
# PyTorch's CUDA wheel tags, newest first, with the lowest driver CUDA version each needs.
CUDA_TAGS = (((13, 0), "cu130"), ((12, 8), "cu128"), ((12, 6), "cu126"))
INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")
GPU_PCI_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
TIMEOUT_S = 10


@dataclass(frozen=True)
class Found:
    """What the probe found on this machine."""

    nvidia_gpus: tuple[str, ...] = ()  # names, from nvidia-smi
    cuda_driver: tuple[int, int] | None = None  # the CUDA version the NVIDIA driver supports
    nvcc: str | None = None  # the CUDA compiler's path
    vulkan_gpus: tuple[str, ...] = ()  # GPUs Vulkan (or the kernel's DRM devices) sees; CPU-type devices excluded
    vulkan_cpu_devices: tuple[str, ...] = ()  # software Vulkan devices (lavapipe), named but not counted as GPUs
    vulkan_tools: tuple[str, ...] = ()  # what of Vulkan's build tools is missing; () when all are here
    apple_silicon: bool = False
    cpu_amx: bool = False  # the CPU has AMX (x86 Linux: /proc/cpuinfo's amx_int8)

    @property
    def has_gpu(self) -> bool:
        return bool(self.nvidia_gpus or self.vulkan_gpus or self.apple_silicon)

    def gpu_names(self) -> str:
        """The GPUs in words ("NVIDIA GeForce RTX 4090", "Apple silicon"), "" when none."""
        names = list(dict.fromkeys(self.nvidia_gpus + self.vulkan_gpus))
        return ", ".join(names + (["Apple silicon (Metal)"] if self.apple_silicon else []))


def _run(*command: str) -> str | None:
    """The command's standard output, or None where it is missing, fails or hangs."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_gpus() -> tuple[tuple[str, ...], tuple[int, int] | None]:
    """(GPU names, the driver's CUDA version) from nvidia-smi; ((), None) where it does not answer."""
    names = _run("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
    if not names or not names.strip():
        return (), None
    header = _run("nvidia-smi") or ""
    version = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", header)
    return (tuple(line.strip() for line in names.splitlines() if line.strip()),
            (int(version.group(1)), int(version.group(2))) if version else None)


def vulkan_devices() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(GPU names, CPU-type device names) from `vulkaninfo --summary`, or None where vulkaninfo is missing or
    fails."""
    out = _run("vulkaninfo", "--summary")
    if out is None:
        return None
    gpus, software = [], []
    for block in re.split(r"\n\s*GPU\d+:\s*\n", out)[1:]:
        kind = re.search(r"deviceType\s*=\s*(\S+)", block)
        name = re.search(r"deviceName\s*=\s*(.+)", block)
        label = name.group(1).strip() if name else "a Vulkan device"
        (software if kind and kind.group(1).endswith("_CPU") else gpus).append(label)
    return tuple(gpus), tuple(software)


def drm_gpus(root: Path = Path("/sys/class/drm")) -> tuple[str, ...]:
    """GPUs the kernel drives (a DRM card of a GPU maker), where vulkaninfo cannot say: "AMD GPU (card0)"."""
    found = []
    for vendor_file in sorted(root.glob("card[0-9]*/device/vendor")):
        if not re.fullmatch(r"card\d+", vendor_file.parent.parent.name):
            continue  # a connector (card0-DP-1) of a card already counted
        try:
            vendor = vendor_file.read_text().strip().lower()
        except OSError:
            continue
        if vendor in GPU_PCI_VENDORS:
            found.append(f"{GPU_PCI_VENDORS[vendor]} GPU ({vendor_file.parent.parent.name})")
    return tuple(found)


def missing_vulkan_tools() -> tuple[str, ...]:
    """What llama.cpp's Vulkan build needs and is not here: its headers (Debian: libvulkan-dev), the SPIR-V
    headers (spirv-headers) and the shader compiler glslc (glslc)."""
    dirs = [Path(d) for d in INCLUDE_DIRS] + ([Path(os.environ["VULKAN_SDK"]) / "include"]
                                              if os.environ.get("VULKAN_SDK") else [])
    missing = []
    if not any((d / "vulkan" / "vulkan.h").is_file() for d in dirs):
        missing.append("Vulkan headers (libvulkan-dev)")
    if not any((d / "spirv" / "unified1" / "spirv.hpp").is_file() for d in dirs):
        missing.append("SPIR-V headers (spirv-headers)")
    if shutil.which("glslc") is None:
        missing.append("glslc")
    return tuple(missing)


def probe(full: bool = True) -> Found:
    """Everything above, for this machine. `full` False (what setup needs): on Linux, vulkaninfo (slow on some
    machines) runs only where the kernel drives a GPU and Vulkan's build tools are here, the only case where its
    answer changes the build."""
    names, driver = nvidia_gpus()
    drm = drm_gpus() if sys.platform.startswith("linux") else ()
    missing = missing_vulkan_tools()
    asks_vulkan = full or not sys.platform.startswith("linux") or (bool(drm) and not missing)
    vulkan = vulkan_devices() if asks_vulkan else None
    gpus, software = vulkan if vulkan is not None else (drm, ())
    return Found(nvidia_gpus=names, cuda_driver=driver, nvcc=shutil.which("nvcc"), vulkan_gpus=gpus,
                 vulkan_cpu_devices=software, vulkan_tools=missing,
                 apple_silicon=platform.system() == "Darwin" and platform.machine() == "arm64",
                 cpu_amx=cpu_has_amx())


def cmake_args(found: Found) -> str:
    """llama.cpp's CMAKE_ARGS for what was found (module docstring)."""
    if found.nvidia_gpus and found.nvcc:
        return CUDA_ARGS
    if (found.vulkan_gpus or found.nvidia_gpus) and not found.vulkan_tools:
        return VULKAN_ARGS
    if found.apple_silicon:
        return METAL_ARGS
    return cpu_cmake_args(found)


def cpu_cmake_args(found: Found) -> str:
    """llama.cpp's CMAKE_ARGS for this CPU alone (what setup builds without a GPU, and `make peers` always)."""
    return CPU_NO_AMX_ARGS if found.cpu_amx else CPU_ARGS


def is_cpu_build(args: str) -> bool:
    """Whether llama.cpp's CMAKE_ARGS `args` (one of cmake_args' answers) build for the CPU alone."""
    return BACKEND_OF_ARGS.get(args) == "CPU"


def why_cpu_build(found: Found) -> str | None:
    """Why a machine with a GPU still gets the CPU build, with what to install; None when it gets a GPU build or
    has no GPU."""
    if not found.has_gpu or not is_cpu_build(cmake_args(found)):
        return None
    wants = "the CUDA toolkit (nvcc), or " if found.nvidia_gpus else ""
    return (f"{found.gpu_names()} is here, but llama.cpp cannot be built for it: install {wants}Vulkan's build "
            f"tools (missing: {', '.join(found.vulkan_tools)}), then `make clean && make setup`")


def torch_spec(found: Found, default: str, cuda_index: str | None) -> str:
    """`default` from `cuda_index`/cuXYZ (the newest CUDA build the driver runs) where an NVIDIA GPU is, else
    `default` as it is (the CPU build of this workplace's index). A driver too old for every tag keeps `default`."""
    if not found.nvidia_gpus or not cuda_index:
        return default
    driver = found.cuda_driver or (0, 0)
    for needs, tag in CUDA_TAGS:
        if driver >= needs:
            return f"{default} --index-url {cuda_index.rstrip('/')}/{tag}"
    return default


def describe(found: Found) -> list[str]:
    """What was found and what setup builds, in lines for the user."""
    lines = [f"NVIDIA: {', '.join(found.nvidia_gpus) or 'none'}"
             + (f" (driver CUDA {found.cuda_driver[0]}.{found.cuda_driver[1]})" if found.cuda_driver else ""),
             f"nvcc: {found.nvcc or 'none'}",
             f"Vulkan GPUs: {', '.join(found.vulkan_gpus) or 'none'}"
             + (f" (software devices, not counted: {', '.join(found.vulkan_cpu_devices)})"
                if found.vulkan_cpu_devices else ""),
             "Vulkan build tools: " + (f"missing {', '.join(found.vulkan_tools)}" if found.vulkan_tools
                                       else "all here"),
             f"Apple silicon: {'yes' if found.apple_silicon else 'no'}",
             "CPU with AMX: " + ("yes (llama.cpp is built without its AMX kernels, which crash)" if found.cpu_amx
                                 else "no"),
             f"llama.cpp builds with: {cmake_args(found)} ({BACKEND_OF_ARGS[cmake_args(found)]})"]
    reason = why_cpu_build(found)
    return lines + ([f"note: {reason}"] if reason else [])


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags as Linux names them (avx2, avx512_bf16, amx_int8, ...); empty where they cannot be
    read (another system)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_amx() -> bool:
    """AMX's integer products (Linux: /proc/cpuinfo's amx_int8), which llama.cpp's AMX kernels need."""
    return "amx_int8" in cpu_flags()


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX-BF16 (Linux: /proc/cpuinfo's flags); False where it cannot be told."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


# What a stamp written before setup recorded its settings was built with: the Makefile's defaults of then.
LEGACY_SETTINGS = {"TORCH_SPEC": "torch==2.13.0", "CMAKE_ARGS": CPU_ARGS}
PACKAGE_OF_SETTING = {"TORCH_SPEC": "torch", "CMAKE_ARGS": "llama-cpp-python"}


def read_settings(path: Path) -> dict[str, str] | None:
    """The settings a file records (NAME=value lines); {} for an empty file (a stamp from before settings were
    recorded), None for a missing one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def record_settings(path: Path, stamp: Path, values: dict[str, str]) -> bool:
    """Writes `values` to `path` when they differ from what it holds (so that its time changes only then, and
    setup runs again only then); returns whether it wrote. A venv set up before settings were recorded (an empty
    stamp) with what are the old defaults gets the file with the stamp's time: nothing is reinstalled for it."""
    if read_settings(path) == values:
        return False
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()), encoding="utf-8")
    if read_settings(stamp) == {} and values == LEGACY_SETTINGS:
        stamp_time = stamp.stat()
        os.utime(path, ns=(stamp_time.st_atime_ns, stamp_time.st_mtime_ns))
    return True


def stale_packages(settings: Path, stamp: Path) -> list[str]:
    """The packages to remove before installing again, because their setting changed since the stamp was written:
    pip keeps an installed torch or llama-cpp-python that meets the requirement, whatever its build. An empty stamp
    counts as LEGACY_SETTINGS; a missing one (a fresh venv) as nothing installed."""
    now, then = read_settings(settings) or {}, read_settings(stamp)
    if then is None:
        return []
    then = then or LEGACY_SETTINGS
    return [package for name, package in PACKAGE_OF_SETTING.items() if now.get(name) != then.get(name)]


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); prints what the Makefile asks, or the report."""
    parser = argparse.ArgumentParser(description="What setup builds for this machine's accelerators.")
    parser.add_argument("--cmake-args", action="store_true", help="print llama.cpp's CMAKE_ARGS for this machine")
    parser.add_argument("--cpu-cmake-args", action="store_true",
                        help="print llama.cpp's CMAKE_ARGS for this CPU alone (`make peers`)")
    parser.add_argument("--torch-spec", metavar="SPEC", help="print the torch requirement to install for SPEC")
    parser.add_argument("--cuda-index", metavar="URL", help="where torch's CUDA builds are (URL/cu128, ...)")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write the effective TORCH_SPEC and CMAKE_ARGS to FILE when they changed")
    parser.add_argument("--stamp", type=Path, metavar="FILE", help="setup's stamp (with --record or --stale)")
    parser.add_argument("--torch-override", default="", help="TORCH_SPEC as the user set it (with --record)")
    parser.add_argument("--cmake-override", default="", help="CMAKE_ARGS as the user set it (with --record)")
    parser.add_argument("--stale", type=Path, metavar="FILE",
                        help="print the packages whose setting in FILE differs from the stamp's")
    args = parser.parse_args(argv)
    if (args.record or args.stale) and not args.stamp:
        parser.error("--record and --stale need --stamp")
    if args.stale:
        print(" ".join(stale_packages(args.stale, args.stamp)))
        return 0
    if args.cpu_cmake_args:
        print(cpu_cmake_args(Found(cpu_amx=cpu_has_amx())))
        return 0
    found = probe(full=not (args.cmake_args or args.torch_spec or args.record))
    if args.record:
        values = {"TORCH_SPEC": args.torch_override.strip() or torch_spec(found, args.torch_spec or "torch",
                                                                          args.cuda_index),
                  "CMAKE_ARGS": args.cmake_override.strip() or cmake_args(found)}
        if record_settings(args.record, args.stamp, values):
            print(f"setup builds with TORCH_SPEC={values['TORCH_SPEC']} CMAKE_ARGS={values['CMAKE_ARGS']}")
    elif args.cmake_args:
        print(cmake_args(found))
    elif args.torch_spec:
        print(torch_spec(found, args.torch_spec, args.cuda_index))
    else:
        print("\n".join(describe(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
