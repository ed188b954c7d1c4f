"""`specchat gpu-check`: the prepared device check of the torch GPU path (measure_gpu.py measures).

One run writes a JSON report (--out): per pair of random-weight models of real shapes, the host synchronisations
per speculative step and the compilations after load (counted over several replies with K from 0 to 16 and a
growing cache), the verification cost curve for 1..17 tokens, the draft step, the compile time, the alpha = 1
ceiling (the target drafting for itself) and the speedups predicted at alpha 0.6, 0.8 and 0.9. `--device cpu
--quick` runs the same checks on tiny shapes in seconds (the test suite does).
"""

from __future__ import annotations

import argparse

from ..core.run_kind import SHAPE_NAMES

# The pairs a device run measures: an 8B target with a 1B draft, and SmolLM2-1.7B with 135M (bf16).
DEVICE_PAIRS = ("llama-3.1-8b:llama-3.2-1b", "smollm2-1.7b:smollm2-135m")
QUICK_PAIRS = ("tiny:tiny",)


def _pair(text: str) -> tuple[str, str]:
    target, _, draft = text.partition(":")
    if target not in SHAPE_NAMES or draft not in SHAPE_NAMES:
        raise argparse.ArgumentTypeError(f"a pair is TARGET:DRAFT, each one of {', '.join(SHAPE_NAMES)}")
    return target, draft


def add_parser(subparsers) -> None:
    check = subparsers.add_parser("gpu-check", help="check the GPU path: host waits per step, compilations after "
                                                    "load, step costs and predicted speedups (JSON report)")
    check.add_argument("--device", default="auto", help="auto (the GPU where there is one), cuda, cpu")
    check.add_argument("--dtype", default="auto", help="auto: bfloat16 on a GPU, float32 on the CPU")
    check.add_argument("--quick", action="store_true", help="tiny shapes and short replies (seconds, any device)")
    check.add_argument("--pairs", type=lambda text: [_pair(p) for p in text.split(",")],
                       help=f"TARGET:DRAFT shapes, comma-separated (default: {', '.join(DEVICE_PAIRS)}; "
                            f"with --quick {', '.join(QUICK_PAIRS)})")
    check.add_argument("--llama-gguf", help="a GGUF file to time on llama.cpp's GPU build too, where it was built "
                                            "with GPU offload")
    check.add_argument("--out", default="gpu-check.json", help="the JSON report (default: gpu-check.json)")
    check.set_defaults(handler=run)


def run(args) -> int:
    from .measure_gpu import check  # torch loads only when the command runs

    return check(args, args.pairs or [_pair(p) for p in (QUICK_PAIRS if args.quick else DEVICE_PAIRS)])
