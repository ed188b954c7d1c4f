"""Which float format a torch target runs in on the CPU, and what the user must know about it.

float32 is exact: speculative replies equal plain decoding token for token, because a pass over K+1 tokens and a
pass over one round alike closely enough that near-ties do not flip. bfloat16 halves the memory and the bytes read
per token (the CPU's bottleneck on large models: docs/catalog.md), and CPUs with AVX512-BF16 or AMX compute it
natively; but there a batched pass and a one-token pass round differently, so on near-ties a speculative reply can
take another token than plain bfloat16 decoding would (docs/performance-torch.md, "What was tried and not kept"). So
"auto" keeps float32 when the model fits in memory at float32, and takes bfloat16 only for a model that would not
fit otherwise, on a CPU that computes it natively; the app then says that replies are not exact and offers float32.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from specchat.models.catalog.entries import fits_at_float32

MAX_HEADER_BYTES = 100 << 20  # safetensors caps its JSON header at 100 MB


def checkpoint_parameters(folder: Path) -> int | None:
    """The number of weights in a folder's safetensors files, read from their headers (no tensor is loaded);
    None when the folder has none."""
    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    if not files:
        return None
    total = 0
    try:
        for file in files:
            with open(file, "rb") as stream:
                (length,) = struct.unpack("<Q", stream.read(8))
                if length > MAX_HEADER_BYTES:  # a damaged file: loading it will say so, not this estimate
                    return None
                header = json.loads(stream.read(length))
            for name, tensor in header.items():
                if name != "__metadata__":
                    count = 1
                    for size in tensor["shape"]:
                        count *= size
                    total += count
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return None  # unreadable: "auto" then keeps float32, and the load reports the file's problem
    return total


def auto_cpu_dtype(parameters: int | None, available_bytes: int | None, native_bf16: bool) -> torch.dtype:
    """float32 unless the model would not fit at float32 and the CPU computes bfloat16 natively."""
    if parameters is None or available_bytes is None or not native_bf16:
        return torch.float32
    return torch.float32 if fits_at_float32(parameters, available_bytes) else torch.bfloat16


def is_exact(dtype: torch.dtype) -> bool:
    """Whether speculative replies are held equal to plain decoding in this format (the tests check float32)."""
    return dtype == torch.float32


def dtype_label(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, str(dtype))


def exactness_note(dtype: torch.dtype) -> str | None:
    """What the user must be told when replies are not held exact; None when they are."""
    if is_exact(dtype):
        return None
    return (f"The model runs in {dtype_label(dtype)}: half the memory, faster on large models, but a reply with "
            "drafts can differ from plain decoding where two tokens nearly tie. Choose float32 in Settings → "
            "Precision for replies that are exactly plain decoding's.")
