"""`specchat costs`: the verification cost curve, the draft's cost and the engine's ceiling on this hardware
(measure_costs.py measures)."""

from __future__ import annotations

import argparse

from ..core.errors import SpecchatError
from ..core.run_kind import SHAPE_NAMES
from .options import DTYPE_CHOICES, positive_int, thread_count, unit_interval


def add_parser(subparsers) -> None:
    costs = subparsers.add_parser("costs", help="measure the verification cost curve, the draft's cost and the "
                                                "engine's ceiling on this hardware")
    costs.add_argument("--target", help="target model SRC (default: the embedded one)")
    costs.add_argument("--shape", choices=sorted(SHAPE_NAMES), help="random weights of this shape instead of --target")
    costs.add_argument("--draft", help="draft model SRC")
    costs.add_argument("--draft-shape", choices=sorted(SHAPE_NAMES), help="random draft weights of this shape")
    costs.add_argument("--device", default="auto")
    costs.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, metavar="DTYPE",
                       help="auto (default), float32, float16 or bfloat16")
    costs.add_argument("--backend", choices=("auto", "llama.cpp", "torch"), default="auto",
                       help="how a GGUF --target runs (default: llama.cpp on the CPU where installed)")
    costs.add_argument("--threads", type=thread_count,
                       help="llama.cpp threads, at most the cores (default: every core)")
    costs.add_argument("--max-n", type=positive_int, default=9, help="measure forwards of 1..N new tokens")
    costs.add_argument("--context", type=positive_int, default=256, help="tokens already cached")
    costs.add_argument("--repeats", type=positive_int, default=10)
    costs.add_argument("--k", type=positive_int, default=4, help="K of the alpha = 1 ceiling run")
    costs.add_argument("--tokens", type=positive_int, default=96, help="tokens of the ceiling run")
    costs.add_argument("--alphas", type=lambda text: [unit_interval(a) for a in text.split(",")],
                       default=[0.3, 0.5, 0.7, 0.9], help="acceptance rates to predict speedups for")
    costs.add_argument("--static-cache", action=argparse.BooleanOptionalAction, default=None,
                       help="static KV cache (default: on for CUDA)")
    costs.add_argument("--packed-weights", action=argparse.BooleanOptionalAction, default=True,
                       help="MKL-packed weights for passes of 4-17 tokens where MKL has them (default: on)")
    costs.add_argument("--json", action="store_true")
    costs.set_defaults(handler=run, trust_remote_code=False, allow_pickle=False)


def run(args) -> int:
    if args.target and args.shape:
        raise SpecchatError("give --target or --shape, not both")
    from .measure_costs import measure  # torch loads only when the command runs: --help stays fast and torch-free

    return measure(args)
