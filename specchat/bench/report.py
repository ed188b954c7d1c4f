"""`specchat bench`'s report: the records summed per category and mode (throughput, speedup over plain decoding,
acceptance, how close the engine comes to Leviathan et al.'s prediction), the printed tables, the environment and
memory figures of the JSON report, and each record as a stored run (source "bench") for the dashboard."""

from __future__ import annotations

import platform
import sys
from typing import TextIO

import torch
import transformers

from ..chats.run_context import RunContext, RunModels
from ..core.acceptance import expected_tokens
from ..core.run_kind import RunKind, speedup
from ..core.vocabulary import PLAIN
from ..engine.backends.llamacpp.library import llama_cpp_available
from ..engine.loading.pair import ModelPair
from ..storage.records import RunRecord
from .runner import OVERHEAD_PARTS, BenchSettings, ModeRecord, add_lists, rounded


def summarize(records: list[ModeRecord]) -> dict:
    """Per-category and overall aggregates per mode, {group: {mode: figures}} (the groups: each category and
    "overall"): throughput = total tokens / total time, and the speedup is the ratio of throughputs to `none` over
    the same prompts (run_kind.speedup: none for a remote mode, whose speed is another machine's). Every row also
    has the group's hindsight oracle (oracle.py; _oracle_figures) and the share of its gain the mode captured."""
    groups: dict[str, dict[str, list[ModeRecord]]] = {}
    for record in records:
        for group in (record.category, "overall"):
            groups.setdefault(group, {}).setdefault(record.mode, []).append(record)
    summary = {}
    for group, by_mode in groups.items():
        plain = by_mode.get(PLAIN, [])
        plain_rate = _throughput(plain)
        decode = _decode_rate(plain)
        oracle = _oracle_figures(plain)
        summary[group] = {mode: _aggregate(rows, plain_rate, _plain_pass_s(plain), decode)
                          for mode, rows in by_mode.items()}
        for row in summary[group].values():
            row.update(oracle, captured=captured(row["speedup"], oracle["oracle_speedup"]),
                       decode_captured=captured(row.get("decode_speedup"), oracle["oracle_decode_speedup"]))
    return summary


def _oracle_figures(plain: list[ModeRecord]) -> dict:
    """The hindsight oracle over a group's plain records (runner.attach_oracle), aggregated as the speedups are:
    plain decoding's total seconds over the oracle's, prompt processing included ("oracle_speedup") and left out
    on both sides ("oracle_decode_speedup"). None unless every plain record of the group has its oracle (a torch
    target's run that measured no pass longer than one token has none)."""
    if not plain or any(r.oracle_s is None or r.oracle_plain_s is None for r in plain):
        return {"oracle_speedup": None, "oracle_decode_speedup": None, "oracle_copied": None}
    plain_s = sum(r.oracle_plain_s for r in plain)
    oracle_s = sum(r.oracle_s for r in plain)
    prefill = sum(r.prefill_s or 0.0 for r in plain)
    decode = oracle_s - prefill
    return {"oracle_speedup": rounded(plain_s / oracle_s) if oracle_s > 0 else None,
            "oracle_decode_speedup": rounded((plain_s - prefill) / decode) if decode > 0 else None,
            "oracle_copied": sum(r.oracle_copied or 0 for r in plain)}


def captured(speedup_: float | None, oracle_speedup: float | None, least_gain: float = 0.01) -> float | None:
    """The share of the oracle's gain a mode took: (speedup - 1) / (oracle_speedup - 1); negative for a mode
    slower than plain decoding, above 1 for one that gains beyond copying from the conversation (a draft model).
    None without either figure, or where the oracle's gain is at most `least_gain` (nothing to share)."""
    if speedup_ is None or oracle_speedup is None or oracle_speedup - 1 <= least_gain:
        return None
    return rounded((speedup_ - 1) / (oracle_speedup - 1))


def _plain_pass_s(plain: list[ModeRecord]) -> float | None:
    """Seconds of one target pass over one token, from plain decoding (its passes after the prefill)."""
    passes = sum((r.target_passes or 1) - 1 for r in plain)
    seconds = sum(r.verify_s or 0.0 for r in plain)
    return seconds / passes if passes and seconds else None


def _decode_rate(plain: list[ModeRecord]) -> float:
    """Plain decoding's tokens/s after the first token (prompt processing excluded)."""
    seconds = sum(r.wall_s - (r.prefill_s or 0.0) for r in plain)
    return sum(r.new_tokens - 1 for r in plain) / seconds if seconds > 0 else 0.0


def _throughput(rows: list[ModeRecord]) -> float:
    wall = sum(r.wall_s for r in rows)
    return sum(r.new_tokens for r in rows) / wall if wall else 0.0


def _aggregate(rows: list[ModeRecord], plain_rate: float, plain_pass_s: float | None,
               plain_decode_rate: float = 0.0) -> dict:
    """The figures of one mode's records (rows, all of one mode) in one group, against plain decoding's throughput,
    pass time and decode rate there. `draft_cost`: seconds of one draft-model forward / seconds of one plain target
    step (c in Leviathan et al.)."""
    rate = _throughput(rows)
    forwards = sum(r.draft_forwards or 0 for r in rows)
    draft_s = sum(r.draft_s or 0.0 for r in rows)
    proposed = [r.draft_proposed for r in rows if r.draft_proposed is not None]
    passes = [r.target_passes for r in rows if r.target_passes]
    return {
        "prompts": len(rows),
        "new_tokens": sum(r.new_tokens for r in rows),
        "wall_s": round(sum(r.wall_s for r in rows), 3),
        "tokens_per_s": round(rate, 3),
        "speedup": rounded(speedup(rate, plain_rate, rows[0].mode)),
        "alpha": rounded(sum(r.draft_accepted for r in rows if r.draft_accepted is not None) / sum(proposed))
        if proposed and sum(proposed) else None,
        "tau": rounded(sum(r.new_tokens for r in rows if r.target_passes) / sum(passes)) if passes else None,
        "identical": sum(1 for r in rows if r.identical) / len(rows),
        "draft_cost": rounded(draft_s / forwards / plain_pass_s) if forwards and plain_pass_s else None,
        # P(draft token i accepted | proposed). Position 0 is the first-token acceptance, the closest to Leviathan's
        # per-token alpha; accepted / proposed ("alpha" above) also counts the tokens proposed past a rejection.
        "acceptance_by_position": [rounded(a / p) for a, p in zip(add_lists(r.accepted_by_position for r in rows),
                                                                   add_lists(r.proposed_by_position for r in rows))
                                   if p],
        **_engine_figures(rows, plain_pass_s, plain_decode_rate),
    }


def _engine_figures(rows: list[ModeRecord], plain_pass_s: float | None, plain_decode_rate: float) -> dict:
    """How close the engine comes to what its measured ingredients allow (our modes only).

    Leviathan et al.'s expected speedup, with the measured cost curve instead of a flat verification cost:
        predicted = t1 * sum_k n_k E(alpha, k) / (verify_s + draft_s),   E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)
    where n_k is the number of steps that verified k drafts, verify_s their target forward time (so verifying k+1
    tokens costs what it measured), draft_s the drafting time, t1 one plain target step, and alpha the i.i.d.
    per-token acceptance estimated from the run. `efficiency` = measured decode speedup (tokens after the first,
    prompt processing excluded on both sides, as in the formula) / predicted: what Python, the verification rule,
    cache cropping, detokenisation and events cost, and how far acceptance is from i.i.d. The overhead shares are
    of the time inside the models (prefill + draft + verify)."""
    ours = [r for r in rows if r.prefill_s is not None]
    if not ours:
        return {}
    model_s = sum(r.prefill_s + (r.draft_s or 0.0) + (r.verify_s or 0.0) for r in ours)
    overhead = {part: sum(r.overhead_s.get(part, 0.0) for r in ours) for part in (*OVERHEAD_PARTS, "other_s")}
    unattributed = overhead["other_s"] - sum(overhead[part] for part in OVERHEAD_PARTS)
    figures = {
        "overhead_share": {part.removesuffix("_s"): rounded(overhead[part] / model_s, 4) for part in OVERHEAD_PARTS}
        | {"python": rounded(max(unattributed, 0.0) / model_s, 4), "total": rounded(overhead["other_s"] / model_s, 4)}
        if model_s else None,
        "verify_curve_ms": _verify_curve_ms(ours),
        "decode_speedup": None, "predicted_speedup": None, "efficiency": None, "iid_alpha": None,
    }
    steps = add_lists(r.steps_by_k for r in ours)
    decode_s = sum(r.wall_s - r.prefill_s for r in ours)
    decode_rate = sum(r.new_tokens - 1 for r in ours) / decode_s if decode_s > 0 else 0.0
    figures["decode_speedup"] = rounded(speedup(decode_rate, plain_decode_rate))
    accepted = sum(r.draft_accepted or 0 for r in ours)
    trials = accepted + sum(r.rejected_steps or 0 for r in ours)
    if not plain_pass_s or not trials or len(steps) < 2:
        return figures
    alpha = accepted / trials
    expected = sum(n * expected_tokens(alpha, k) for k, n in enumerate(steps))
    spent = sum(r.verify_s or 0.0 for r in ours) + sum(r.draft_s or 0.0 for r in ours)
    predicted = plain_pass_s * expected / spent if spent else None
    figures.update(iid_alpha=rounded(alpha), predicted_speedup=rounded(predicted))
    if predicted and figures["decode_speedup"]:
        figures["efficiency"] = rounded(figures["decode_speedup"] / predicted)
    return figures


def _verify_curve_ms(rows: list[ModeRecord]) -> dict[int, float]:
    """Mean milliseconds of one target pass over n = k + 1 tokens, as measured during the run."""
    steps = add_lists(r.steps_by_k for r in rows)
    seconds = add_lists(r.verify_s_by_k for r in rows)
    return {k + 1: round(1000 * s / n, 2) for k, (n, s) in enumerate(zip(steps, seconds)) if n}


def environment() -> dict:
    """The JSON report's "environment": the versions and machine the figures were measured with."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
            "llama_cpp": _llama_cpp_version()}


def _llama_cpp_version() -> str | None:
    if not llama_cpp_available():
        return None
    import llama_cpp  # an optional install (the `llama` extra)

    return llama_cpp.__version__


def print_summary(summary: dict, modes: list[str], out: TextIO | None = None) -> None:
    """The table `specchat bench` prints: summarize()'s figures, one line per category and mode (modes in the
    order given), then the category's hindsight oracle (its speedup; "captured": the share of its gain each mode
    took), overall last; to `out` (stdout when None)."""
    out = out or sys.stdout
    width = max(10, *(len(m) + 1 for m in modes))  # llama-server-draft and the like
    header = (f"{'category':<15}{'mode':<{width}}{'tokens':>8}{'tok/s':>9}{'speedup':>9}{'alpha':>8}{'tau':>7}"
              f"{'identical':>11}{'draft c':>9}{'1st acc':>9}{'captured':>10}")
    print(header, file=out)
    print("-" * len(header), file=out)
    groups = sorted(g for g in summary if g != "overall") + ["overall"]
    for group in groups:
        for mode in modes:
            row = summary[group].get(mode)
            if row is None:
                continue
            print(f"{group:<15}{mode:<{width}}{row['new_tokens']:>8}{row['tokens_per_s']:>9.2f}"
                  f"{_fmt(row['speedup'], 'x'):>9}{_fmt(row['alpha']):>8}{_fmt(row['tau']):>7}"
                  f"{row['identical'] * 100:>10.0f}%{_fmt(row.get('draft_cost')):>9}"
                  f"{_fmt((row.get('acceptance_by_position') or [None])[0]):>9}"
                  f"{_fmt_share(row.get('captured')):>10}", file=out)
        oracle = next((row.get("oracle_speedup") for row in summary[group].values()), None)
        if oracle is not None:
            print(f"{group:<15}{'oracle':<{width}}{'-':>8}{'-':>9}{_fmt(oracle, 'x'):>9}", file=out)


def _fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _fmt(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def bench_run_values(record: ModeRecord, pair: ModelPair, settings: BenchSettings,
                     app_session_id: int | None, remote_name: str | None = None) -> RunRecord | None:
    """One benchmark prompt-mode as a generation run for Store.record_run (source "bench"), so the dashboard charts
    benchmarks beside chat replies and races; None for the reference and peer modes (transformers' and llama.cpp's
    generation are timed beside ours, not our drafters, and have no per-step statistics to store).

    Benchmarks decode greedily with seed 0. The speedup is measured against plain decoding of the same prompt in
    the same run; plain decoding itself gets none (it is the baseline), as the race's plain lane."""
    kind = RunKind.parse(record.mode)
    if kind.is_reference or kind.is_peer:  # other engines' generation, timed beside ours: no per-step statistics
        return None
    measured = record.speedup if not kind.is_plain else None
    # a remote engine's under its model's name, on no device or draft of ours
    context = (RunContext(settings.config(), RunModels.remote(remote_name or pair.target.name), record.mode)
               if kind.is_remote else RunContext.of_pair(pair, record.mode, settings.config()))
    return context.record(record.run_figures(), "bench", app_session_id=app_session_id, category=record.category,
                          speedup=measured, speedup_basis="measured" if measured is not None else None,
                          baseline_tokens_per_s=record.tokens_per_s / measured if measured else None)


def resident_mb() -> float | None:
    """This process's resident memory now, in MB (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_resident_mb() -> float:
    """This process's peak resident memory so far, in MB (the JSON report's "peak")."""
    import resource  # Unix only: imported when asked

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def print_profile(summary: dict, modes: list[str], memory: dict | None = None, out: TextIO | None = None) -> None:
    """`specchat bench --profile`: where each mode's time goes, overall."""
    out = out or sys.stdout
    overall = summary["overall"]
    print("\nEngine efficiency (decode phase; predicted = Leviathan's formula with the measured cost curve)", file=out)
    print(f"{'mode':<10}{'decode x':>9}{'predicted':>10}{'efficiency':>11}{'iid alpha':>10}   verify ms by tokens "
          "verified (n: ms)", file=out)
    for mode in modes:
        row = overall.get(mode) or {}
        if "verify_curve_ms" not in row:
            continue
        curve = " ".join(f"{n}:{ms:.0f}" for n, ms in list(row["verify_curve_ms"].items())[:9])
        print(f"{mode:<10}{_fmt(row['decode_speedup'], 'x'):>9}{_fmt(row['predicted_speedup'], 'x'):>10}"
              f"{_fmt(row['efficiency']):>11}{_fmt(row['iid_alpha']):>10}   {curve}", file=out)
    oracle = next((row.get("oracle_decode_speedup") for row in overall.values()), None)
    if oracle is not None:  # the hindsight oracle's decode speedup (oracle.py): the ceiling of the column above
        print(f"{'oracle':<10}{_fmt(oracle, 'x'):>9}", file=out)
    parts = [p.removesuffix("_s") for p in OVERHEAD_PARTS] + ["python", "total"]
    print("\nOverhead outside the models, as a share of the time inside them", file=out)
    print(f"{'mode':<10}" + "".join(f"{p:>12}" for p in parts), file=out)
    for mode in modes:
        shares = (overall.get(mode) or {}).get("overhead_share")
        if shares:
            print(f"{mode:<10}" + "".join(f"{shares[p] * 100:>11.1f}%" for p in parts), file=out)
    if memory:
        print("\nMemory (resident MB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items() if v is not None),
              file=out)
