"""Setup's probe of the machine (specchat/core/accelerators.py): what llama.cpp and torch are built for on each kind of
machine, that a software Vulkan device is no GPU, that it runs on the standard library alone before the venv exists,
and how the recorded settings make `make setup` run again (and reinstall) only when they change."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.core import accelerators as acc
from specchat.core.accelerators import Found

ROOT = Path(__file__).resolve().parent.parent
LAVAPIPE = """==========
VULKANINFO
==========

Devices:
========
GPU0:
	apiVersion         = 1.3.230
	deviceType         = PHYSICAL_DEVICE_TYPE_CPU
	deviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
	driverName         = llvmpipe
"""
DISCRETE = LAVAPIPE.replace("GPU0:", "GPU1:").replace("PHYSICAL_DEVICE_TYPE_CPU", "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU") \
    .replace("llvmpipe (LLVM 15.0.6, 256 bits)", "AMD Radeon RX 7900 XTX")


@pytest.mark.parametrize("found, args", [
    (Found(nvidia_gpus=("NVIDIA H200",), nvcc="/usr/bin/nvcc"), acc.CUDA_ARGS),
    (Found(nvidia_gpus=("NVIDIA H200",)), acc.VULKAN_ARGS),  # no nvcc: Vulkan, whose tools are here
    (Found(nvidia_gpus=("NVIDIA H200",), vulkan_tools=("glslc",)), acc.CPU_ARGS),  # neither can be built
    (Found(vulkan_gpus=("AMD Radeon RX 7900 XTX",)), acc.VULKAN_ARGS),
    (Found(vulkan_gpus=("AMD Radeon RX 7900 XTX",), vulkan_tools=("glslc",)), acc.CPU_ARGS),
    (Found(vulkan_cpu_devices=("llvmpipe",)), acc.CPU_ARGS),  # lavapipe is no GPU
    (Found(nvcc="/usr/local/bin/nvcc"), acc.CPU_ARGS),  # a CUDA compiler without a GPU (this machine)
    (Found(apple_silicon=True, vulkan_tools=("glslc",)), acc.METAL_ARGS),
    (Found(vulkan_tools=("glslc",)), acc.CPU_ARGS),
    (Found(vulkan_tools=("glslc",), cpu_amx=True), acc.CPU_NO_AMX_ARGS),  # AMX's kernels crash: built without
    (Found(vulkan_gpus=("AMD Radeon RX 7900 XTX",), vulkan_tools=("glslc",), cpu_amx=True), acc.CPU_NO_AMX_ARGS),
    (Found(nvidia_gpus=("NVIDIA H200",), nvcc="/usr/bin/nvcc", cpu_amx=True), acc.CUDA_ARGS),
])
def test_llama_cpp_is_built_for_the_accelerator_found(found, args):
    assert acc.cmake_args(found) == args
    reason = acc.why_cpu_build(found)
    assert (reason is not None) == (found.has_gpu and acc.is_cpu_build(args))
    if reason:
        assert "make clean && make setup" in reason and "glslc" in reason


def test_a_cpu_with_amx_builds_without_its_kernels(tmp_path):
    """The flags come from /proc/cpuinfo; the compiler then leaves AMX out (GCC keeps an explicit -mno-amx-int8
    beside -march=native), and setup's report says why."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n\n")
    assert {"avx2", "amx_int8"} <= acc.cpu_flags(cpuinfo) and acc.cpu_flags(tmp_path / "absent") == frozenset()
    assert acc.CPU_NO_AMX_ARGS.split()[0] == acc.CPU_ARGS and acc.is_cpu_build(acc.CPU_NO_AMX_ARGS)
    assert acc.cpu_cmake_args(Found(nvidia_gpus=("NVIDIA H200",), nvcc="/usr/bin/nvcc", cpu_amx=True)) \
        == acc.CPU_NO_AMX_ARGS  # the peers' llama-server: the CPU's build whatever GPU is here
    assert not acc.is_cpu_build(acc.CUDA_ARGS)
    assert "without its AMX kernels" in "\n".join(acc.describe(Found(cpu_amx=True)))
    if shutil.which("gcc"):
        defines = subprocess.run(["gcc", "-mno-amx-int8", "-march=native", "-dM", "-E", "-"], input="",
                                 capture_output=True, text=True, timeout=60).stdout
        assert "__AMX_INT8__" not in defines


def test_torch_is_a_cuda_build_only_where_an_nvidia_gpu_is():
    index = "https://example.invalid/whl"
    assert acc.torch_spec(Found(), "torch==2.13.0", index) == "torch==2.13.0"
    assert acc.torch_spec(Found(vulkan_gpus=("AMD",)), "torch==2.13.0", index) == "torch==2.13.0"
    nvidia = Found(nvidia_gpus=("NVIDIA H200",), cuda_driver=(12, 9))
    assert acc.torch_spec(nvidia, "torch==2.13.0", index) == f"torch==2.13.0 --index-url {index}/cu128"
    newer = Found(nvidia_gpus=("NVIDIA H200",), cuda_driver=(13, 0))
    assert acc.torch_spec(newer, "torch==2.13.0", index + "/").endswith("/whl/cu130")
    old_driver = Found(nvidia_gpus=("Tesla K80",), cuda_driver=(11, 4))
    assert acc.torch_spec(old_driver, "torch==2.13.0", index) == "torch==2.13.0"


def test_vulkaninfo_and_the_kernels_drm_devices_are_read(monkeypatch, tmp_path):
    monkeypatch.setattr(acc, "_run", lambda *command: LAVAPIPE + DISCRETE)
    assert acc.vulkan_devices() == (("AMD Radeon RX 7900 XTX",), ("llvmpipe (LLVM 15.0.6, 256 bits)",))
    monkeypatch.setattr(acc, "_run", lambda *command: None)
    assert acc.vulkan_devices() is None and acc.nvidia_gpus() == ((), None)
    for card, vendor in (("card0", "0x1002"), ("card1", "0x1af4"), ("card1-DP-1", "0x10de")):
        (tmp_path / card / "device").mkdir(parents=True)
        (tmp_path / card / "device" / "vendor").write_text(vendor + "\n")
    assert acc.drm_gpus(tmp_path) == ("AMD GPU (card0)",)  # a virtio display is no GPU; connectors are skipped


def test_the_probe_runs_on_the_standard_library_alone():
    """The Makefile runs it with the system's python3 before the venv exists: -S -I leaves out every installed
    package, so an import beyond the standard library would fail here."""
    done = subprocess.run([sys.executable, "-S", "-I", str(ROOT / "specchat" / "core/accelerators.py"), "--cmake-args"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in acc.BACKEND_OF_ARGS
    cpu = subprocess.run([sys.executable, "-S", "-I", str(ROOT / "specchat" / "core/accelerators.py"),
                          "--cpu-cmake-args"], capture_output=True, text=True, timeout=60)
    assert cpu.stdout.strip() == acc.cpu_cmake_args(Found(cpu_amx=acc.cpu_has_amx()))  # `make peers`
    report = subprocess.run([sys.executable, "-S", "-I", str(ROOT / "specchat" / "core/accelerators.py")],
                            capture_output=True, text=True, timeout=60)
    assert "llama.cpp builds with: " in report.stdout


def test_settings_are_rewritten_only_when_they_change_and_an_old_stamp_reinstalls_nothing(tmp_path):
    settings, stamp = tmp_path / ".specchat-settings", tmp_path / ".specchat-installed"
    stamp.write_text("")  # written by `touch` before settings were recorded
    os.utime(stamp, ns=(10**18, 10**18))
    assert acc.record_settings(settings, stamp, dict(acc.LEGACY_SETTINGS))
    assert settings.stat().st_mtime_ns == stamp.stat().st_mtime_ns  # make sees nothing newer than the stamp
    assert acc.stale_packages(settings, stamp) == []
    assert not acc.record_settings(settings, stamp, dict(acc.LEGACY_SETTINGS))  # unchanged: not written
    vulkan = {"TORCH_SPEC": "torch==2.13.0", "CMAKE_ARGS": acc.VULKAN_ARGS}
    assert acc.record_settings(settings, stamp, vulkan)
    assert settings.stat().st_mtime_ns > stamp.stat().st_mtime_ns  # setup runs again
    assert acc.stale_packages(settings, stamp) == ["llama-cpp-python"]
    stamp.write_text(settings.read_text())  # the setup that followed
    cuda_torch = dict(vulkan, TORCH_SPEC="torch==2.13.0 --index-url https://example.invalid/whl/cu128")
    acc.record_settings(settings, stamp, cuda_torch)
    assert acc.stale_packages(settings, stamp) == ["torch"]
    assert acc.stale_packages(settings, tmp_path / "no-stamp") == []  # a fresh venv has nothing to remove


def test_the_command_line_records_the_overrides(tmp_path, capsys):
    settings, stamp = tmp_path / "settings", tmp_path / "stamp"
    acc.main(["--record", str(settings), "--stamp", str(stamp), "--torch-spec", "torch==2.13.0",
              "--cuda-index", "https://example.invalid/whl", "--torch-override=", "--cmake-override=-DGGML_VULKAN=ON"])
    assert acc.read_settings(settings)["CMAKE_ARGS"] == acc.VULKAN_ARGS
    assert "CMAKE_ARGS=-DGGML_VULKAN=ON" in capsys.readouterr().out
    acc.main(["--stale", str(settings), "--stamp", str(stamp)])
    assert capsys.readouterr().out.strip() == ""
    with pytest.raises(SystemExit):
        acc.main(["--stale", str(settings)])
