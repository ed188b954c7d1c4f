"""The float format a torch target runs in on the CPU: float32 unless it would not fit, and a note when not exact."""

import torch

from specchat.engine.backends.torch.precision import auto_cpu_dtype, checkpoint_parameters, exactness_note, is_exact
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.models.catalog.entries import fits_at_float32
from specchat.models.sources import ModelSource

GIB = 1 << 30


def test_auto_keeps_float32_while_the_model_fits():
    small = 1_700_000_000  # 6.8 GB at float32
    assert auto_cpu_dtype(small, 24 * GIB, native_bf16=True) == torch.float32


def test_auto_takes_bfloat16_only_for_a_model_too_big_on_a_cpu_that_computes_it():
    seven_b = 7_600_000_000  # 30 GB at float32, 15 GB at bfloat16
    assert not fits_at_float32(seven_b, 24 * GIB)
    assert auto_cpu_dtype(seven_b, 24 * GIB, native_bf16=True) == torch.bfloat16
    assert auto_cpu_dtype(seven_b, 24 * GIB, native_bf16=False) == torch.float32  # emulated bf16 is slower
    assert auto_cpu_dtype(None, 24 * GIB, native_bf16=True) == torch.float32  # unknown size: the exact choice


def test_only_float32_is_called_exact_and_the_others_say_what_to_do():
    assert is_exact(torch.float32) and exactness_note(torch.float32) is None
    note = exactness_note(torch.bfloat16)
    assert "bfloat16" in note and "float32" in note and "Precision" in note


def test_parameters_are_counted_from_the_checkpoint_headers(model_folders, target):
    assert checkpoint_parameters(model_folders / "target") == sum(p.numel() for p in target.state_dict().values())
    assert checkpoint_parameters(model_folders / "missing") is None


def test_a_damaged_checkpoint_header_gives_no_estimate(tmp_path):
    (tmp_path / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + b"{")
    assert checkpoint_parameters(tmp_path) is None
    (tmp_path / "model.safetensors").write_bytes((5).to_bytes(8, "little") + b"{not ")
    assert checkpoint_parameters(tmp_path) is None


def test_a_loaded_model_says_its_format(model_folders):
    exact = load_model(ModelSource.parse(str(model_folders / "target")), LoadOptions(device="cpu"))
    assert exact.dtype == torch.float32 and exact.runs_on == "cpu, float32" and exact.precision_note is None
    half = load_model(ModelSource.parse(str(model_folders / "target")), LoadOptions(device="cpu", dtype="bfloat16"))
    assert half.runs_on == "cpu, bfloat16" and "float32" in half.precision_note
