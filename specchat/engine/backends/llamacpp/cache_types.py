"""The KV cache types of a llama.cpp runner's two contexts: the prompt reader's (llama.cpp's default float16) and
the decoding context's (a bfloat16 K, which keeps llama.cpp's CPU flash attention batch-invariant; llama_runner.py's
module docstring). One definition for the runner, the reader, the kernel check, the state shelf's key and the
benchmark's peers, which all run or name these caches.
"""

from __future__ import annotations

F16, BF16 = 1, 30  # GGML_TYPE_F16, GGML_TYPE_BF16
READ_TYPE = F16  # the prompt reader's cache: llama.cpp's default


def decoding_types(offloaded: bool) -> tuple[int, int]:
    """(type_k, type_v) of the decoding context's KV cache (llama_runner.py's module docstring). llama.cpp's CPU
    flash attention splits a one-token pass between threads, or tiles a long pass, only where K and V are both
    float16 or float32; else every row is reduced by one thread in one order, so a verification pass gives the
    rows of one-token passes. A bfloat16 K keeps it so; V stays float16 there, llama.cpp's default, whose rows the
    kernel adds without converting them: a one-token pass after 2,048 positions of the embedded model costs 13.5
    ms against 19.4 ms with a bfloat16 V (docs/performance.md). With layers offloaded, both bfloat16: a GPU's
    kernels are checked for that pair."""
    return (BF16, BF16) if offloaded else (BF16, F16)
