"""Where llama.cpp's layers go (engine/backends/llamacpp/offload.py), without a GPU: the layer plan from free memory and the user's
override, what llama.cpp's log says it did, the kernel verdict's key per placement, what the app says about a GPU
that is here but unused (engine/backends/llamacpp/built.py), and "fits here" counting the GPU's memory."""

import pytest

from specchat.core.accelerators import Found
from specchat.core.errors import ModelLoadError
from specchat.engine.backends.llamacpp import offload
from specchat.engine.backends.llamacpp.built import BuildReport
from specchat.engine.backends.llamacpp.kernels import verdict_key
from specchat.engine.backends.llamacpp.offload import LlamaDevice, LoadLog, Placement, plan_layers, requested_layers
from specchat.models.catalog.fit import Machine, run_here

MIB = 1 << 20
VULKAN = LlamaDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", "Vulkan", 8 << 30, 16 << 30)


def test_the_plan_offloads_what_fits_and_follows_an_override():
    # 30 layers + the output head in a 310 MiB file: 10 MiB a layer, plus 1 MiB of KV cache each.
    size, kv = 310 * MIB, 1 * MIB
    assert plan_layers(None, 30, size, 8 << 30, kv) == -1  # everything fits
    room = offload.RESERVE_BYTES + 11 * 12 * MIB  # room for 12 layers beside the reserve
    assert plan_layers(None, 30, size, room, kv) == 12
    assert plan_layers(None, 30, size, offload.RESERVE_BYTES // 2, kv) == 0
    assert plan_layers(None, 30, size, None, kv) == -1  # unknown: llama.cpp says so loudly if it cannot
    assert plan_layers(0, 30, size, 8 << 30, kv) == 0 and plan_layers(7, 30, size, 0, kv) == 7
    assert plan_layers(99, 30, size, 0, kv) == -1 and plan_layers(-1, 30, size, 0, kv) == -1


def test_the_requested_layers_come_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(offload.GPU_LAYERS_ENV, raising=False)
    assert requested_layers() is None and requested_layers(5) == 5
    for raw, value in (("-1", -1), ("0", 0), ("12", 12), ("auto", None), (" ", None)):
        monkeypatch.setenv(offload.GPU_LAYERS_ENV, raw)
        assert requested_layers() == value
    assert requested_layers(3) == 3  # the option wins
    for bad in ("all", "-2", "1.5"):
        monkeypatch.setenv(offload.GPU_LAYERS_ENV, bad)
        with pytest.raises(ModelLoadError, match="SPECCHAT_GPU_LAYERS=.*use -1"):
            requested_layers()


def test_the_placement_is_what_llama_cpps_log_reports():
    log = LoadLog()
    for line in (b"load_tensors: offloading output layer to GPU\n", b"load_tensors: offloaded 31/31 layers to GPU\n",
                 b"load_tensors:   CPU_Mapped model buffer size =    20.25 MiB\n",
                 b"load_tensors:      Vulkan0 model buffer size =    78.50 MiB\n"):
        log.line(line)
    placed = log.placement(VULKAN, 30)
    assert placed == Placement(31, 31, "Vulkan0", "Vulkan") and placed.offloaded
    assert placed.describe() == "Vulkan0, 31/31 layers" and placed.key == "Vulkan:Vulkan0:31/31"
    assert log.buffers == {"CPU_Mapped": 20.25, "Vulkan0": 78.5}
    cpu_only = LoadLog()
    cpu_only.line(b"load_tensors: offloaded 31/31 layers to GPU\n")  # said, but no buffer on the device: not so
    assert not cpu_only.placement(VULKAN, 30).offloaded
    assert LoadLog().placement(None, 30) == Placement(0, 31) and Placement(0, 31).describe() == "CPU"
    assert Placement(0, 31).key == ""


def test_a_gpu_placement_has_kernel_verdicts_of_its_own(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    on_cpu = verdict_key(model, True)
    assert verdict_key(model, True, "") == on_cpu  # the CPU keeps the key it had before offloading existed
    all_layers = verdict_key(model, True, "Vulkan:Vulkan0:-1")
    assert all_layers != on_cpu and all_layers != verdict_key(model, True, "Vulkan:Vulkan0:12")
    assert all_layers != verdict_key(model, True, "CUDA:CUDA0:-1")


def report(found: Found, **llama) -> BuildReport:
    values = dict(llama_version="0.3.36", llama_backends=("CPU",), torch_version="2.13.0")
    values.update(llama)
    return BuildReport(found=found, **values)


def test_a_gpu_that_is_here_but_unused_is_said_with_the_fix():
    nvidia = Found(nvidia_gpus=("NVIDIA H200",), nvcc="/usr/bin/nvcc")
    notes = report(nvidia).unused_gpu()
    assert len(notes) == 2
    assert "torch is a CPU build" in notes[0] and "make clean && make setup" in notes[0]
    assert "built for the CPU only" in notes[1] and "CMAKE_ARGS=-DGGML_CUDA=ON" in notes[1]
    used = report(nvidia, llama_backends=("CPU", "CUDA"), llama_gpu_offload=True, torch_cuda="12.8",
                  llama_devices=(LlamaDevice("CUDA0", "NVIDIA H200", "gpu", "CUDA", 100 << 30, 140 << 30),))
    assert used.unused_gpu() == []
    assert "offloads to CUDA0 (NVIDIA H200)" in used.llama_line() and "CUDA 12.8" in used.torch_line()
    no_device = report(Found(vulkan_gpus=("AMD Radeon",)), llama_backends=("CPU", "Vulkan"))
    assert "finds no device" in no_device.unused_gpu()[0]
    no_tools = report(Found(vulkan_gpus=("AMD Radeon",), vulkan_tools=("glslc",)))
    assert "glslc" in no_tools.unused_gpu()[0]
    lavapipe_only = report(Found(vulkan_cpu_devices=("llvmpipe",)))
    assert lavapipe_only.unused_gpu() == [] and "CPU only" in lavapipe_only.llama_line()
    assert "not installed" in report(Found(), llama_version=None).llama_line()


def test_fits_here_counts_the_gpus_memory_for_a_gguf_file_llama_cpp_offloads(catalog):
    coder = catalog.get("Qwen/Qwen2.5-Coder-1.5B-Instruct")
    big_ram_small_gpu = Machine("cpu", 64 << 30, False, llama_cpp=True, llama_gpu_bytes=256 * MIB)
    here = run_here(coder, big_ram_small_gpu)
    assert here.format == "Q4_K_M" and here.fit.verdict == "too big"  # about 1 GB in 256 MB of VRAM
    assert run_here(coder, Machine("cpu", 64 << 30, False, llama_cpp=True)).fit.verdict == "fits"  # the RAM
    gpu = Machine("cuda", 4 << 30, False, llama_cpp=True, gpu_format="bf16", llama_gpu_bytes=24 << 30)
    assert run_here(coder, gpu).format == "Q4_K_M" and run_here(coder, gpu).fit.verdict == "fits"
    torch_gpu_only = Machine("cuda", 24 << 30, False, llama_cpp=True, gpu_format="bf16")
    assert run_here(coder, torch_gpu_only).format == "bf16"  # llama.cpp on the CPU: the checkpoint on the GPU
    assert "llama.cpp on the GPU" in gpu.describe()


def test_a_gguf_files_shape_is_read_from_its_header_alone(tmp_path):
    from specchat.engine.loading.gguf_header import header_values, layer_shape
    from specchat.models.sources import embedded_model_file

    embedded = embedded_model_file()
    assert layer_shape(embedded) == (30, 3, 64)  # SmolLM2-135M: 30 blocks, 3 KV heads of 64 (576 / 9 heads)
    assert header_values(embedded, {"general.architecture", "llama.block_count"}) == {
        "general.architecture": "llama", "llama.block_count": 30}
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"hello world")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        layer_shape(not_gguf)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(embedded.read_bytes()[:200])  # the header ends in the middle of its keys
    with pytest.raises(ModelLoadError, match="could not read the header of cut.gguf"):
        layer_shape(cut)
