"""What `specchat costs` measures (costs.py reads its options): what one step costs on this hardware, and what
speedup that allows.

Measures, for a target (a real model or random weights of a named shape) and optionally a draft:
  - the target's forward time over n = 1..N new tokens after a context: the verification cost curve,
  - one draft forward (one token),
  - the engine's ceiling and overhead: the target drafting for itself (alpha = 1, every proposal accepted) at a
    fixed K, against plain decoding, with the time outside the models per step.
Random weights say nothing about acceptance, so the predicted speedups combine these costs with acceptance rates
given on the command line (e.g. the ones `specchat bench` measured on the CPU), and say so.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..core.errors import SpecchatError
from ..engine.backends.torch.runners import runner_for
from ..engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from ..engine.drafting import ModelDrafter, NoDrafter
from ..engine.loading.load import LoadOptions, choose_device, choose_dtype, load_model
from ..models.catalog.entries import predicted_speedup
from ..models.sources import ModelSource

# Llama-family shapes (hidden, layers, heads, kv heads, intermediate, vocab) for random-weight measurements.
SHAPES = {
    "llama-3.1-8b": (4096, 32, 32, 8, 14336, 128256),
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, 128256),
    "smollm2-1.7b": (2048, 24, 32, 32, 8192, 49152),
    "smollm2-360m": (960, 32, 15, 5, 2560, 49152),
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152),
    "tiny": (64, 2, 4, 2, 128, 320),  # for tests
}


def random_model(shape: str, device: torch.device, dtype: torch.dtype):
    """A Llama of a named shape with random weights, built directly on the device in its dtype."""
    hidden, layers, heads, kv_heads, intermediate, vocab = SHAPES[shape]
    config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab,
                         max_position_embeddings=8192, tie_word_embeddings=shape.startswith("smollm2"))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def forward_curve(model, device: torch.device, max_n: int, context: int, repeats: int,
                  static_cache: bool, packed_weights: bool = True) -> dict[int, float]:
    """Median seconds of one forward over n new tokens after `context` cached ones, n = 1..max_n, as the engine
    runs it (on this CPU the lean forward and the tuned output head; eager on a GPU: compiled graphs are timed by
    `specchat bench`, not here)."""
    if isinstance(model, torch.nn.Module):
        runner = runner_for(model, static_cache=static_cache, compile_steps=False, packed_weights=packed_weights)
    else:  # a runner, e.g. llama.cpp's
        runner = model
    vocab = runner.vocab_size
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, context), generator=generator).to(device)
    cache = runner.new_cache(context + max_n + 1)
    runner.forward(prefix, cache, keep=1, prefill=True)
    curve = {}
    for n in range(1, max_n + 1):
        tokens = torch.randint(0, vocab, (1, n), generator=generator).to(device)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up (allocations, kernel choice)
            synchronize(device)
            started = time.perf_counter()
            runner.forward(tokens, cache, keep=n)
            synchronize(device)
            times.append(time.perf_counter() - started)
            runner.rollback(cache, context)
        curve[n] = statistics.median(times[1:])
    return curve


@dataclass
class Ceiling:
    plain_tokens_per_s: float
    self_draft_tokens_per_s: float  # the target as its own draft: alpha = 1
    k: int
    overhead_per_step_ms: float  # wall time outside the model forwards, per step, in the self-drafting run


def engine_ceiling(model, tokenizer, k: int, tokens: int) -> Ceiling:
    """Plain decoding vs the target drafting for itself with a fixed K (every proposal accepted): the most
    speculative decoding can give with this verification curve, and the engine's own cost per step."""
    prompt = list(range(10, 42))
    config = GenerationConfig(max_new_tokens=tokens, k=k, adaptive_k=False, seed=0)
    plain = SpeculativeEngine(model, tokenizer, NoDrafter(), eos_token_ids=[])
    speculative = SpeculativeEngine(model, tokenizer, ModelDrafter(model), eos_token_ids=[])
    for engine in (plain, speculative):
        engine.generate(prompt, GenerationConfig(max_new_tokens=4, k=k, adaptive_k=False, seed=0))  # warm-up
    plain_stats = plain.generate(prompt, config).stats
    stats = speculative.generate(prompt, config).stats
    steps = max(stats.target_passes - 1, 1)
    return Ceiling(plain_tokens_per_s=plain_stats.tokens_per_s, self_draft_tokens_per_s=stats.tokens_per_s, k=k,
                   overhead_per_step_ms=1000 * stats.other_s / steps)


def predicted_speedups(curve: dict[int, float], draft_s: float, alphas: list[float]) -> list[dict]:
    """For each alpha: the K that maximises E[tokens](alpha, K) / (verify(K+1) + K draft) and its speedup over
    one plain step per token, as models/catalog/entries.py's predicted_speedup computes it (Leviathan's formula on the
    measured curve). Takes the curve {n: seconds}, one draft step in seconds and the alphas; returns a row
    {"alpha", "best_k", "speedup" (3 decimals)} per alpha, for the report."""
    rows = []
    for alpha in alphas:
        best_k, best = predicted_speedup(curve, draft_s, alpha)
        rows.append({"alpha": alpha, "best_k": best_k, "speedup": round(best, 3)})
    return rows


def free_draft_ceiling(curve: dict[int, float]) -> dict:
    """The most any drafter could give on this curve: a perfect draft that costs nothing, K tokens accepted per
    step, so (K+1) tokens per verify(K+1) against one token per plain step; at the best K."""
    best = max(curve, key=lambda n: n * curve[1] / curve[n])
    return {"k": best - 1, "speedup": round(best * curve[1] / curve[best], 3)}


class _NoTokenizer:
    """Random-weight models have no tokenizer; the engine only decodes text for events (skipped here)."""

    eos_token_id = None

    def decode(self, ids, **options):
        return "".join(chr(0x4E00 + i % 20000) for i in ids)


def measure(args) -> int:
    """`specchat costs`: measures what its options ask for and prints the report (a table, or JSON with --json)."""
    device = choose_device(args.device)
    dtype = choose_dtype(device, args.dtype)
    options = LoadOptions(device=str(device), dtype=str(dtype).removeprefix("torch."), backend=args.backend,
                          threads=args.threads)
    target, tokenizer, target_name = _model(args.target, args.shape, device, dtype, options)
    _check_room(target, target_name, args.context + args.max_n + 1)
    static = device.type == "cuda" if args.static_cache is None else args.static_cache
    report = {"device": str(device), "dtype": str(dtype).removeprefix("torch."), "target": target_name,
              "context": args.context, "static_cache": static, "packed_weights": args.packed_weights,
              "note": "random weights: costs only; predicted speedups use the alphas given" if args.shape else ""}
    curve = forward_curve(target, device, args.max_n, args.context, args.repeats, static, args.packed_weights)
    report["target_forward_ms"] = {n: round(1000 * s, 3) for n, s in curve.items()}
    draft_s = 0.0
    if args.draft or args.draft_shape:
        draft, _, draft_name = _model(args.draft, args.draft_shape, device, dtype, options)
        _check_room(draft, draft_name, args.context + 2)
        draft_s = forward_curve(draft, device, 1, args.context, args.repeats, static, packed_weights=False)[1]
        report.update(draft=draft_name, draft_forward_ms=round(1000 * draft_s, 3),
                      draft_cost_ratio=round(draft_s / curve[1], 4))
    report["predicted"] = predicted_speedups(curve, draft_s, args.alphas)
    report["free_draft_ceiling"] = free_draft_ceiling(curve)
    if isinstance(target, torch.nn.Module):
        ceiling = engine_ceiling(target, tokenizer or _NoTokenizer(), args.k, args.tokens)
        report["ceiling"] = {**vars(ceiling), "speedup": round(ceiling.self_draft_tokens_per_s /
                                                             ceiling.plain_tokens_per_s, 3)}
    else:  # the target drafting for itself needs it in torch too; the free-draft ceiling above says the most
        report["ceiling"] = None
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print(report)
    return 0


def _model(source: str | None, shape: str | None, device, dtype, options: LoadOptions):
    """The model to time, its tokenizer (None for random weights) and its name: random weights of `shape` on
    `device` in `dtype`, else the model `source` names (the embedded one when None) loaded with `options` (a
    llama.cpp target as its native runner)."""
    if shape:
        return random_model(shape, device, dtype), None, f"random {shape}"
    loaded = load_model(ModelSource.parse(source or "embedded"), options)
    if loaded.native is not None:
        return loaded.native.runner(), loaded.tokenizer, f"{loaded.name} on llama.cpp ({loaded.native.threads} threads)"
    return loaded.model, loaded.tokenizer, loaded.name


def _check_room(model, name: str, positions: int) -> None:
    """SpecchatError when `model` (a torch module or a llama.cpp runner) reads fewer than `positions` tokens:
    --context and --max-n past its window would only fail in an allocation of gigabytes, or in llama.cpp."""
    window = getattr(model, "context_window", None)
    if window is None:
        window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if window is not None and positions > window:
        raise SpecchatError(f"--context and --max-n ask for {positions:,} positions, but {name} reads at most "
                            f"{window:,}: give a smaller --context")


def _print(report: dict, out=None) -> None:
    out = out or sys.stdout
    print(f"{report['target']} on {report['device']} ({report['dtype']}, context {report['context']}, "
          f"{'static' if report['static_cache'] else 'dynamic'} cache"
          f"{'' if report.get('packed_weights', True) else ', packed weights off'})", file=out)
    curve = report["target_forward_ms"]
    print("target forward, ms by new tokens: " + " ".join(f"{n}:{ms:.1f}" for n, ms in curve.items()), file=out)
    print("  relative to one token:          " + " ".join(f"{n}:{ms / curve[1]:.2f}" for n, ms in curve.items()),
          file=out)
    if "draft" in report:
        print(f"draft {report['draft']}: {report['draft_forward_ms']:.2f} ms a token "
              f"(c = {report['draft_cost_ratio']:.3f} of a target step)", file=out)
    c = report["ceiling"]
    if c is not None:
        print(f"ceiling (target as its own draft, K = {c['k']}, alpha = 1): "
              f"{c['self_draft_tokens_per_s']:.1f} tok/s vs plain {c['plain_tokens_per_s']:.1f} = {c['speedup']:.2f}x; "
              f"engine overhead {c['overhead_per_step_ms']:.2f} ms a step", file=out)
    free = report["free_draft_ceiling"]
    print(f"ceiling with a perfect draft that costs nothing: {free['speedup']:.2f}x at K = {free['k']}", file=out)
    predicted = ", ".join(f"alpha {r['alpha']:.2f}: K={r['best_k']} {r['speedup']:.2f}x" for r in report["predicted"])
    print("predicted speedup at the best K for a given alpha" + (f" ({report['note']})" if report["note"] else "")
          + ": " + predicted, file=out)
