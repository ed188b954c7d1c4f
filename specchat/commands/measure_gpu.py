"""What `specchat gpu-check` measures (gpu_check.py reads its options): the torch GPU path of the engine, on
random weights of real shapes, as it runs in the app (runners.StaticCacheRunner for the target, a static
ModelDrafter for the draft: one static cache each, steps compiled at load, drafts kept on the device).

Per pair it reports:
  - host_syncs_per_step: the most host synchronisations any speculative step made (engine/backends/torch/host_syncs.py counts
    reads of device values and tensors built from Python data), over replies with K = 0..16 and prompts that grow,
    so the cache grows; where each one came from; and on a GPU CUDA's own count of synchronising calls;
  - recompiles_after_load: frames dynamo compiled during those replies (0: every length was compiled at load);
    graph_breaks_after_load likewise;
  - the verification cost curve for 1..17 new tokens after 256 cached, the draft's step, the compile time;
  - the alpha = 1 ceiling (the target drafting for itself, K = 4 and 8) against plain decoding, and the engine's own
    work per step (everything but the models' passes) against a verification pass;
  - the speedups predicted at alpha 0.6, 0.8 and 0.9 from the measured curve and draft step (catalog's formula).
Random weights say nothing about acceptance: that is why the predictions take alpha as given.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from ..engine.backends.torch.host_syncs import HostSyncCounter
from ..engine.backends.torch.runners import runner_for
from ..engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from ..engine.drafting import ModelDrafter, NoDrafter
from ..engine.loading.load import choose_device, choose_dtype
from ..models.catalog.entries import predicted_speedup
from .measure_costs import _NoTokenizer, random_model, synchronize

ALPHAS = (0.6, 0.8, 0.9)


def check(args, pairs: list[tuple[str, str]]) -> int:
    """Runs the check on each (target shape, draft shape) of `pairs`, writes the JSON report to args.out and prints
    a summary."""
    device = choose_device(args.device)
    dtype = choose_dtype(device, args.dtype)
    report = {"device": _device_name(device), "dtype": str(dtype).removeprefix("torch."), "quick": args.quick,
              "torch": torch.__version__, "python": platform.python_version(), "pairs": []}
    for target_shape, draft_shape in pairs:
        report["pairs"].append(measure_pair(target_shape, draft_shape, device, dtype, args.quick))
        Path(args.out).write_text(json.dumps(report, indent=1))  # a pair's figures survive a later one's failure
    report["llama_cpp"] = llama_cpp_check(args.llama_gguf)
    Path(args.out).write_text(json.dumps(report, indent=1))
    _print(report)
    return 0


def measure_pair(target_shape: str, draft_shape: str, device: torch.device, dtype: torch.dtype, quick: bool) -> dict:
    """Everything the report holds for one pair of shapes (module docstring)."""
    torch.manual_seed(0)
    target = random_model(target_shape, device, dtype)
    draft = random_model(draft_shape, device, dtype)
    frames, breaks = counters["frames"]["ok"], sum(counters["graph_break"].values())
    started = time.perf_counter()
    runner = runner_for(target, static_cache=True, compile_steps=True)  # compiles every length, then the drafts'
    backend = runner.compile_backend  # the draft's steps compiled as the target's: traced on the CPU too
    drafter = ModelDrafter(draft, static=True, compile_backend=backend)
    # The target drafting for itself measures the ceiling; its own compilation is not what is checked, so --quick
    # leaves it eager.
    self_drafter = ModelDrafter(target, static=True, compile_backend=None if quick else backend)
    synchronize(device)
    compile_s = time.perf_counter() - started
    loaded_frames, loaded_breaks = counters["frames"]["ok"], sum(counters["graph_break"].values())
    syncs = count_step_syncs(runner, drafter, quick)
    result = {"target": target_shape, "draft": draft_shape, "compile_s": round(compile_s, 2),
              "frames_compiled_at_load": loaded_frames - frames, "graph_breaks_at_load": loaded_breaks - breaks,
              **syncs,
              "recompiles_after_load": counters["frames"]["ok"] - loaded_frames,
              "graph_breaks_after_load": sum(counters["graph_break"].values()) - loaded_breaks,
              "buckets": list(runner.buckets)}
    curve = verification_curve(runner, device, repeats=3 if quick else 20)
    draft_s = draft_step(drafter, device, repeats=3 if quick else 50)
    result["verify_ms"] = {n: round(1000 * s, 4) for n, s in curve.items()}
    result["verify_cost"] = {n: round(s / curve[1], 3) for n, s in curve.items()}
    result["draft_step_ms"] = round(1000 * draft_s, 4)
    result["draft_cost_ratio"] = round(draft_s / curve[1], 4)
    result["ceiling"] = [self_draft_ceiling(runner, self_drafter, k, 24 if quick else 192) for k in (4, 8)]
    result["engine_work"] = engine_work(runner, drafter, curve, 24 if quick else 128)
    result["predicted"] = [predicted_row(curve, draft_s, alpha) for alpha in ALPHAS]
    return result


def predicted_row(curve: dict[int, float], draft_s: float, alpha: float) -> dict:
    """The best K and its predicted speedup at `alpha` on the measured curve and draft step (catalog's formula)."""
    k, speedup = predicted_speedup(curve, draft_s, alpha)
    return {"alpha": alpha, "best_k": k, "speedup": round(speedup, 3)}


def count_step_syncs(runner, drafter, quick: bool) -> dict:
    """Replies with K = 0, 1, 4, 8, 16 (fixed, so every verification length is met) on prompts that grow, the
    host synchronisations of each speculative step counted apart from the prefill's."""
    per_step: list[int] = []
    where: dict[str, int] = {}
    cuda_syncs = 0
    new_tokens = 12 if quick else 48
    for reply, k in enumerate((0, 1, 4, 8, 16)):
        engine = SpeculativeEngine(runner, _NoTokenizer(), drafter if k else NoDrafter(), eos_token_ids=[])
        prompt = [(7 * i + reply) % 300 + 5 for i in range(24 + 40 * reply)]
        config = GenerationConfig(max_new_tokens=new_tokens, k=max(k, 1), adaptive_k=False, seed=0)
        events = engine.stream(prompt, config)
        next(events)  # the prefill and the first token
        while True:
            with HostSyncCounter() as syncs, _CudaSyncs(runner.device) as cuda:
                event = next(events, None)
            if event is None:
                break
            per_step.append(syncs.count)
            cuda_syncs = max(cuda_syncs, cuda.count)
            for name, count in syncs.where.items():
                where[name] = max(where.get(name, 0), count)
    return {"host_syncs_per_step": max(per_step), "host_syncs_mean": round(statistics.mean(per_step), 3),
            "host_sync_calls": where, "cuda_syncs_per_step": cuda_syncs if runner.device.type == "cuda" else None,
            "steps_counted": len(per_step)}


class _CudaSyncs:
    """CUDA's own count of synchronising calls while active (torch.cuda's sync debug mode warns at each one)."""

    def __init__(self, device: torch.device):
        self.on = device.type == "cuda"
        self.count = 0

    def __enter__(self):
        if self.on:
            import warnings

            self._catch = warnings.catch_warnings(record=True)
            self._seen = self._catch.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        if self.on:
            torch.cuda.set_sync_debug_mode("default")
            self.count = sum("synchroniz" in str(w.message) for w in self._seen)
            self._catch.__exit__(*exc)
        return False


@torch.inference_mode()
def verification_curve(runner, device: torch.device, repeats: int, context: int = 256) -> dict[int, float]:
    """Median seconds of a verification pass over n = 1..17 new tokens after `context` cached ones, as the engine
    runs it (padded to its compiled length)."""
    cache = runner.new_cache(context + 18)
    runner.forward(torch.arange(5, 5 + context, device=device).view(1, -1), cache, keep=1, prefill=True)
    curve = {}
    for n in range(1, 18):
        ids = torch.arange(7, 7 + n, device=device).view(1, -1)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            synchronize(device)
            started = time.perf_counter()
            runner.forward(ids, cache, keep=n)
            synchronize(device)
            times.append(time.perf_counter() - started)
            runner.rollback(cache, context)
        curve[n] = statistics.median(times[1:])
    return curve


@torch.inference_mode()
def draft_step(drafter: ModelDrafter, device: torch.device, repeats: int) -> float:
    """Median seconds of one draft step (a drafted token fed back on the device) after 256 cached tokens."""
    backend = drafter._backend
    backend.reset()
    backend.forward(list(range(5, 261)))
    token = torch.tensor([9], device=device)
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        started = time.perf_counter()
        backend.forward_ids(token)
        synchronize(device)
        times.append(time.perf_counter() - started)
        backend.crop(256)
    return statistics.median(times[1:])


def self_draft_ceiling(runner, self_drafter: ModelDrafter, k: int, tokens: int) -> dict:
    """The target drafting for itself at a fixed K (every proposal accepted: alpha = 1) against plain decoding on
    the same runner: the most speculative decoding can give with this curve and this draft cost."""
    prompt = list(range(10, 42))
    config = GenerationConfig(max_new_tokens=tokens, k=k, adaptive_k=False, seed=0)
    plain = SpeculativeEngine(runner, _NoTokenizer(), NoDrafter(), eos_token_ids=[])
    drafted = SpeculativeEngine(runner, _NoTokenizer(), self_drafter, eos_token_ids=[])
    for engine in (plain, drafted):
        engine.generate(prompt, GenerationConfig(max_new_tokens=8, k=k, adaptive_k=False, seed=0))  # warm-up
    plain_stats, stats = plain.generate(prompt, config).stats, drafted.generate(prompt, config).stats
    return {"k": k, "plain_tokens_per_s": round(plain_stats.tokens_per_s, 2),
            "self_draft_tokens_per_s": round(stats.tokens_per_s, 2),
            "speedup": round(stats.tokens_per_s / plain_stats.tokens_per_s, 3),
            "tokens_per_step": round(stats.new_tokens / max(stats.target_passes - 1, 1), 2)}


def engine_work(runner, drafter: ModelDrafter, curve: dict[int, float], tokens: int) -> dict:
    """The engine's own work per step (everything but the models' passes: the rule, the rollback, the policy,
    detokenizing, events) at K = 4, with each phase waiting for the device so that the GPU's time is the models',
    against a verification pass of K + 1 tokens."""
    engine = SpeculativeEngine(runner, _NoTokenizer(), drafter, eos_token_ids=[])
    engine.settle_phases = True
    stats = engine.generate(list(range(10, 42)), GenerationConfig(max_new_tokens=tokens, k=4, adaptive_k=False,
                                                                  seed=0)).stats
    per_step = stats.other_s / max(stats.target_passes - 1, 1)
    return {"k": 4, "per_step_ms": round(1000 * per_step, 4), "verify_ms": round(1000 * curve[5], 4),
            "share_of_verify": round(per_step / curve[5], 4)}


def llama_cpp_check(gguf: str | None) -> dict:
    """Whether llama.cpp's GPU build is here to time; a GGUF file on it is timed by `specchat costs --target FILE`
    (this check says where to, not a second copy of that)."""
    try:
        import llama_cpp
    except ImportError:
        return {"status": "skipped: llama-cpp-python is not installed here"}
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    if not offload:
        return {"status": "skipped: llama.cpp here was built without GPU offload"}
    if gguf is None:
        return {"status": "built with GPU offload; give --llama-gguf FILE to time a model on it"}
    return {"status": f"time it with: specchat costs --target {gguf} --backend llama.cpp --max-n 17"}


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or 'x86'})"


def _print(report: dict) -> None:
    print(f"gpu-check on {report['device']} ({report['dtype']}{', quick' if report['quick'] else ''})")
    for pair in report["pairs"]:
        print(f"  {pair['target']} + {pair['draft']}: host syncs per step {pair['host_syncs_per_step']} (mean "
              f"{pair['host_syncs_mean']}), recompiles after load {pair['recompiles_after_load']}, compile "
              f"{pair['compile_s']} s")
        cost = pair["verify_cost"]
        print("    verify cost by new tokens: " + " ".join(f"{n}:{c}" for n, c in cost.items()))
        print(f"    draft step {pair['draft_step_ms']} ms (c = {pair['draft_cost_ratio']}); engine work "
              f"{pair['engine_work']['share_of_verify']:.1%} of a verification pass")
        print("    alpha = 1: " + ", ".join(f"K={c['k']} {c['speedup']}x" for c in pair["ceiling"]))
        print("    predicted: " + ", ".join(f"alpha {p['alpha']}: K={p['best_k']} {p['speedup']:.2f}x"
                                          for p in pair["predicted"]))
    print(f"  llama.cpp: {report['llama_cpp']['status']}")
