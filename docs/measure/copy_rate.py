"""How much of the target's reply prompt lookup could copy, what our lookup proposes, and what that is worth.

Step 1 (needs the model, a few minutes): the target's plain greedy replies to the Spec-Bench sample that
`specchat bench --suite spec-bench --per-task 10` runs (same sample, chat template, 128 new tokens a turn, multi-turn
questions answered in two turns on the model's own first reply), cached with --replies. Step 2 (offline, seconds):
over each turn's (prompt, reply) tokens

- the oracle copy rate: the share of reply tokens t_i such that the n-gram ending the context (prompt + reply[:i])
  followed by t_i occurs earlier in that context, for n = 1..4, and for the longest suffix match (>= 2) when any of
  its occurrences continues with t_i;
- the share of reply tokens inside runs of >= 4 / >= 8 consecutive reply tokens that occur contiguously in the prompt;
- what prompt lookup proposes at every position (8 tokens, as if K were free) and how much of it the reply accepts:
  PromptLookupDrafter as shipped (checked against the class itself) and variants of it (--variants);
- the speedup of decoding each variant would give with the draft length chosen per confidence class (the matched
  n-gram length) from its measured acceptance by expected_tokens() and a verify-cost curve, simulated step by step
  over the real replies: under the curve measured on llama.cpp here and under a flat (GPU-like) one. Also with K
  chosen in hindsight (an upper bound for that variant), and for an oracle lookup that takes, at every step, the
  earlier occurrence of the last token whose continuation the reply follows longest.

    .venv/bin/python docs/measure/copy_rate.py --replies copy-replies.json --out copy-rate.json [--variants]

--replies is read when it exists (no model loaded) and written otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from specchat.engine.decoding.adaptive import expected_tokens

MAX_NEW_TOKENS = 128
K_MAX = 8  # tokens proposed per position
CAP = 64  # longest suffix match measured for the oracle
# verify(n) in ms, `specchat costs` on llama.cpp here (the brief's curve), and a flat one like a GPU's
CPU_CURVE = {1: 6.4, 2: 12.3, 3: 15.4, 4: 18.1, 5: 22.6, 6: 26.1, 7: 29.1, 8: 29.3, 9: 34.2}
FLAT_CURVE = {n: 1.0 for n in range(1, K_MAX + 2)}
TASKS = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")


# --- step 1: replies ------------------------------------------------------------------------------------------------

def generate(path: Path, per_task: int) -> dict:
    from specchat import bench
    from specchat.engine.chat_prompt import Message, build_prompt_ids
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource
    from specchat.resources import spec_bench_questions

    prompts = bench.load_prompts(spec_bench_questions().read_text(encoding="utf-8").splitlines(), "Spec-Bench")
    prompts = bench.spec_bench_sample(prompts, per_task)
    pair = load_pair(ModelSource.parse("embedded"))
    runner = bench.BenchRunner(pair, bench.BenchSettings(max_new_tokens=MAX_NEW_TOKENS))
    tokenizer = pair.target.tokenizer
    runner.run_turn("none", build_prompt_ids(tokenizer, [Message("user", prompts[0].turns[0])]), 16)  # warm-up
    turns = []
    for number, prompt in enumerate(prompts, 1):
        history = []
        for index, turn in enumerate(prompt.turns):  # as BenchRunner.run_prompt
            history.append(Message("user", turn))
            ids = build_prompt_ids(tokenizer, history)
            out = runner.run_turn("none", ids, MAX_NEW_TOKENS)
            history.append(Message("assistant", out.text))
            turns.append({"question_id": prompt.question_id, "task": prompt.category, "turn": index,
                          "prompt_ids": list(ids), "reply_ids": list(out.token_ids), "text": out.text,
                          "prefill_s": out.stats.prefill_s, "wall_s": out.stats.wall_s})
        print(f"[{number}/{len(prompts)}] {prompt.category:<14} q{prompt.question_id}", file=sys.stderr, flush=True)
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    data = {"target": pair.target.name, "backend": pair.target.backend, "per_task": per_task,
            "max_new_tokens": MAX_NEW_TOKENS, "generated": time.strftime("%Y-%m-%d %H:%M"),
            "normalized_class": normalized_classes(vocab), "turns": turns}
    path.write_text(json.dumps(data), encoding="utf-8")
    return data


def normalized_classes(vocab: list[str]) -> list[int]:
    """Token id -> class of its lower-cased text without (byte-level BPE) leading/trailing whitespace; tokens that
    are only whitespace form one class."""
    classes: dict[str, int] = {}
    out = []
    for piece in vocab:
        text = (piece or "").replace("Ġ", " ").replace("Ċ", "\n").replace("ĉ", "\t").strip().lower() or "<ws>"
        out.append(classes.setdefault(text, len(classes)))
    return out


# --- step 2: analysis -----------------------------------------------------------------------------------------------

VARIANTS = {  # name: (max_ngram, min_ngram, selection, normalized matching, confidence class)
    "shipped (latest, n 1-6)": (6, 1, "latest", False, "n"),
    "max_ngram 3": (3, 1, "latest", False, "n"),
    "max_ngram 4": (4, 1, "latest", False, "n"),
    "max_ngram 8": (8, 1, "latest", False, "n"),
    "max_ngram 10": (10, 1, "latest", False, "n"),
    "max_ngram 12": (12, 1, "latest", False, "n"),
    "min_ngram 2": (6, 2, "latest", False, "n"),
    "min_ngram 3": (6, 3, "latest", False, "n"),
    "most frequent continuation": (6, 1, "frequent", False, "n"),
    "longest continuation": (6, 1, "longest", False, "n"),
    "prompt first": (6, 1, "prompt", False, "n"),
    "normalized text": (6, 1, "latest", True, "n"),
    # the shipped proposal, other confidence classes for the draft-length policy
    "class: match length to 16": (6, 1, "latest", False, "n16"),
    "class: occurrences agree": (6, 1, "latest", False, "agree"),
    "class: occurrences 1/2/3+": (6, 1, "latest", False, "count"),
    "class: in prompt or reply": (6, 1, "latest", False, "source"),
}


def candidates(x: np.ndarray, m: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Earlier copies j < m-1 of x[m-1] and how many tokens back each agrees with x[:m]'s end (at most cap), as
    PromptLookupDrafter.propose measures them."""
    ends = np.flatnonzero(x[: m - 1] == x[m - 1])
    agree = np.ones(len(ends), dtype=np.int64)
    alive = np.ones(len(ends), dtype=bool)
    for back in range(1, min(cap, m - 1)):
        before = ends - back
        alive &= before >= 0
        idx = np.flatnonzero(alive)
        alive[idx] = x[before[idx]] == x[m - 1 - back]
        if not alive.any():
            break
        agree += alive
    return ends, agree


def continuations(full: np.ndarray, ends: np.ndarray, m: int) -> np.ndarray:
    """[len(ends), K_MAX] tokens after each end inside the context x[:m], -1 past it."""
    pos = ends[:, None] + 1 + np.arange(K_MAX)[None, :]
    return np.where(pos < m, full[np.minimum(pos, len(full) - 1)], -1)


def accepted(tokens: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Leading agreement of each row of tokens with want (len <= K_MAX)."""
    tokens = np.atleast_2d(tokens)[:, : len(want)]
    if tokens.shape[1] == 0:
        return np.zeros(len(tokens), dtype=np.int64)
    same = tokens == want[None, : tokens.shape[1]]
    return np.cumprod(same, axis=1).sum(axis=1)


def choose(variant, ends, agree, cont, prompt_len):
    """The variant's proposal (tokens row, class) from the candidates, or None."""
    max_n, min_n, selection, _, confidence = variant
    if len(ends) == 0:
        return None
    capped = np.minimum(agree, max_n)
    n = int(capped.max())
    if n < min_n:
        return None
    pool = np.flatnonzero(capped >= n)  # in order of position
    if selection == "latest":
        if confidence == "n16":
            return cont[pool[-1]], int(min(agree.max(), 16))
        if confidence == "agree":  # do all occurrences of the match go on with the same token?
            return cont[pool[-1]], 10 * n + int(len(set(cont[pool, 0].tolist())) == 1)
        if confidence == "count":
            return cont[pool[-1]], 10 * n + min(len(pool), 3)
        if confidence == "source":
            return cont[pool[-1]], 10 * n + int(ends[pool[-1]] >= prompt_len - 1)
        return cont[pool[-1]], n
    if selection == "prompt":
        in_prompt = pool[ends[pool] < prompt_len - 1]
        return cont[(in_prompt if len(in_prompt) else pool)[-1]], n
    if selection == "longest":
        lengths = (cont[pool] >= 0).sum(axis=1)
        return cont[pool[np.flatnonzero(lengths == lengths.max())[-1]]], n
    # most frequent continuation: token by token, the commonest next token among the occurrences still agreeing
    # (ties: the latest occurrence's)
    rows = cont[pool]
    out = []
    for o in range(K_MAX):
        column = rows[:, o]
        valid = column >= 0
        if not valid.any():
            break
        counts = Counter(column[valid].tolist())
        best = max(counts.values())
        token = next(t for t in reversed(column[valid].tolist()) if counts[t] == best)
        out.append(token)
        rows = rows[column == token]
    return np.array(out + [-1] * (K_MAX - len(out))), n


def covered(prompt: np.ndarray, reply: np.ndarray, min_len: int) -> np.ndarray:
    """Mask of reply tokens inside a run of >= min_len consecutive reply tokens occurring contiguously in prompt."""
    ending = np.zeros(len(reply), dtype=np.int64)  # longest run ending at reply[i] found in the prompt
    previous = np.zeros(len(prompt), dtype=np.int64)
    for i, token in enumerate(reply):
        now = np.zeros(len(prompt), dtype=np.int64)
        hit = prompt == token
        now[1:][hit[1:]] = previous[:-1][hit[1:]] + 1
        now[0] = int(hit[0])
        ending[i] = now.max() if len(now) else 0
        previous = now
    mask = np.zeros(len(reply), dtype=bool)
    for i, length in enumerate(ending):
        if length >= min_len:
            mask[i - length + 1 : i + 1] = True
    return mask


def analyse_turn(turn: dict, norm_class: np.ndarray, variants: dict, check) -> dict:
    prompt = np.asarray(turn["prompt_ids"], dtype=np.int64)
    reply = np.asarray(turn["reply_ids"], dtype=np.int64)
    full = np.concatenate([prompt, reply])
    classes = norm_class[full]
    p = len(prompt)
    rows = {"copy": np.zeros((len(reply), 5), dtype=bool),  # n = 1..4, longest >= 2
            "oracle_run": np.zeros(len(reply), dtype=np.int64),
            "kmax": np.zeros(len(reply), dtype=np.int64)}
    per_variant = {name: {"proposed": np.zeros(len(reply), dtype=bool), "run": np.zeros(len(reply), np.int64),
                          "length": np.zeros(len(reply), np.int64), "cls": np.zeros(len(reply), np.int64)}
                   for name in variants}
    for i in range(len(reply)):
        m = p + i
        target = reply[i]
        want = reply[i : i + K_MAX]
        kmax = min(K_MAX, len(reply) - 1 - i)  # the target's own token ends the step
        rows["kmax"][i] = kmax
        ends, agree = candidates(full, m, CAP)
        cont = continuations(full, ends, m)
        hits = cont[:, 0] == target
        for n in range(1, 5):
            rows["copy"][i, n - 1] = bool((hits & (agree >= n)).any())
        if len(ends):
            longest = agree.max()
            rows["copy"][i, 4] = longest >= 2 and bool((hits & (agree == longest)).any())
            rows["oracle_run"][i] = int(accepted(cont, want[:kmax]).max()) if kmax else 0
        norm = None
        for name, variant in variants.items():
            if variant[3]:
                if norm is None:
                    nends, nagree = candidates(classes, m, CAP)
                    norm = (nends, nagree, continuations(full, nends, m))
                choice = choose(variant, *norm, p)
            else:
                choice = choose(variant, ends, agree, cont, p)
            if check is not None and name == "shipped (latest, n 1-6)":
                check(full[:m], choice)
            if choice is None:
                continue
            tokens, cls = choice
            record = per_variant[name]
            length = min(int((tokens >= 0).sum()), kmax)
            record["proposed"][i] = length > 0
            record["length"][i] = length
            record["run"][i] = int(accepted(tokens[:length], want[:length])[0]) if length else 0
            record["cls"][i] = cls
    rows["variants"] = per_variant
    rows["span4"] = covered(prompt, reply, 4)
    rows["span8"] = covered(prompt, reply, 8)
    return rows


def k_table(alphas: dict[int, float], curve: dict[int, float]) -> dict[int, int]:
    """Per class, the draft length maximising expected tokens per unit of verify time (0: plain step)."""
    table = {}
    for cls, alpha in alphas.items():
        rates = [expected_tokens(alpha, k) / curve[k + 1] for k in range(K_MAX + 1)]
        table[cls] = int(np.argmax(rates))  # the shortest of equally good lengths
    return table


def class_alphas(turns_rows: list[dict], name: str) -> dict[int, float]:
    """Per confidence class, per-token acceptance counted as the policy does (k trials cut at the first failure)."""
    successes, trials = defaultdict(float), defaultdict(float)
    for rows in turns_rows:
        record = rows["variants"][name]
        for i in np.flatnonzero(record["proposed"]):
            run, length, cls = int(record["run"][i]), int(record["length"][i]), int(record["cls"][i])
            successes[cls] += run
            trials[cls] += run + (1 if run < length else 0)
    return {cls: successes[cls] / trials[cls] for cls in trials if trials[cls]}


def simulate(rows: dict, name: str | None, curve: dict[int, float], table: dict[int, int] | None) -> float:
    """Verify time of the whole reply: step by step over the real reply, K per class from table (None: K chosen in
    hindsight, the accepted run whenever drafting it pays). name None: the oracle lookup."""
    n = len(rows["kmax"])
    i, spent = 0, 0.0
    while i < n:
        if name is None:
            run, length, cls = rows["oracle_run"][i], rows["kmax"][i], None
            proposed = length > 0
        else:
            record = rows["variants"][name]
            proposed = record["proposed"][i]
            run, length, cls = record["run"][i], record["length"][i], record["cls"][i]
        k = 0
        if proposed:
            if table is None:
                k = int(run) if run and (run + 1) / curve[run + 1] > 1 / curve[1] else 0
            else:
                k = min(table.get(int(cls), 0), int(length))
        got = min(int(run), k)
        spent += curve[k + 1]
        i += got + 1
    return spent


def summarize(task_turns: list[tuple[dict, dict]], variants: dict) -> dict:
    turns = [t for t, _ in task_turns]
    rows = [r for _, r in task_turns]
    tokens = sum(len(r["kmax"]) for r in rows)
    copy = np.concatenate([r["copy"] for r in rows])
    out = {"turns": len(turns), "reply_tokens": tokens, "mean_reply_tokens": round(tokens / len(turns), 1),
           "mean_prompt_tokens": round(sum(len(t["prompt_ids"]) for t in turns) / len(turns), 1),
           "copy_rate": {f"n={n}": round(float(copy[:, n - 1].mean()), 3) for n in range(1, 5)},
           "span>=4": round(float(np.concatenate([r["span4"] for r in rows]).mean()), 3),
           "span>=8": round(float(np.concatenate([r["span8"] for r in rows]).mean()), 3)}
    out["copy_rate"]["longest>=2"] = round(float(copy[:, 4].mean()), 3)
    oracle = np.concatenate([r["oracle_run"] for r in rows])
    out["oracle_lookup_mean_run"] = round(float(oracle.mean()), 3)
    prefill = sum(t["prefill_s"] for t in turns)
    decode = sum(t["wall_s"] - t["prefill_s"] for t in turns)
    out["prefill_share"] = round(prefill / (prefill + decode), 3)
    # a perfect free draft at the best K (1.75x decoding on the cpu curve), end to end with this prefill share
    best = max((k + 1) * CPU_CURVE[1] / CPU_CURVE[k + 1] for k in range(K_MAX + 1))
    out["perfect_draft_cpu"] = {"decode": round(best, 3),
                                "end_to_end": round(1 / (out["prefill_share"] + (1 - out["prefill_share"]) / best), 3)}

    def speedups(name, table_for):
        result = {}
        for label, curve in (("cpu", CPU_CURVE), ("flat", FLAT_CURVE)):
            table = table_for(curve)
            spent = [simulate(r, name, curve, table) for r in rows]
            plain = [len(r["kmax"]) * curve[1] for r in rows]
            result[label] = round(sum(plain) / sum(spent), 3)
            if label == "cpu":  # end to end, with the measured prefill and decode times of these turns
                wall = sum(t["wall_s"] for t in turns)
                new = sum(t["prefill_s"] + (t["wall_s"] - t["prefill_s"]) * s / pl
                          for t, s, pl in zip(turns, spent, plain))
                result["cpu_end_to_end"] = round(wall / new, 3)
        return result

    out["oracle_lookup_speedup"] = speedups(None, lambda curve: None)
    out["variants"] = {}
    for name in variants:
        records = [r["variants"][name] for r in rows]
        proposed = np.concatenate([v["proposed"] for v in records])
        runs = np.concatenate([v["run"] for v in records])[proposed]
        alphas = class_alphas(rows, name)
        out["variants"][name] = {
            "proposal_rate": round(float(proposed.mean()), 3),
            "first_token_acceptance": round(float((runs >= 1).mean()), 3) if len(runs) else None,
            "acceptance_at": {k: round(float((runs >= k).mean()), 3) if len(runs) else None for k in (1, 2, 4, 8)},
            "mean_accepted_per_proposal": round(float(runs.mean()), 3) if len(runs) else 0.0,
            "accepted_per_reply_token": round(float(runs.sum() / tokens), 3),
            "alpha_by_class": {c: round(a, 3) for c, a in sorted(alphas.items())},
            "k_by_class_cpu": k_table(alphas, CPU_CURVE),
            "speedup": speedups(name, lambda curve: k_table(alphas, curve)),
            "speedup_hindsight_k": speedups(name, lambda curve: None),
        }
    return out


def checker():
    """Asserts that the emulated shipped lookup proposes what PromptLookupDrafter itself does."""
    from specchat.engine.drafting import PromptLookupDrafter

    drafter = PromptLookupDrafter()
    count = [0]

    def check(context: np.ndarray, choice) -> None:
        draft = drafter.propose(context.tolist(), K_MAX)
        mine = None if choice is None else ([int(t) for t in choice[0] if t >= 0], choice[1])
        theirs = None if draft is None else (draft.tokens, draft.acceptance_class.length)
        assert mine == theirs, (mine, theirs)
        count[0] += 1

    check.count = count
    return check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replies", type=Path, required=True, help="cache of the replies (read, else written)")
    parser.add_argument("--out", type=Path, help="JSON report")
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--variants", action="store_true", help="also the lookup variants (slower)")
    parser.add_argument("--no-check", action="store_true", help="skip checking against PromptLookupDrafter")
    args = parser.parse_args()
    if args.replies.exists():
        data = json.loads(args.replies.read_text(encoding="utf-8"))
    else:
        data = generate(args.replies, args.per_task)
    norm_class = np.asarray(data["normalized_class"], dtype=np.int64)
    variants = VARIANTS if args.variants else {k: VARIANTS[k] for k in list(VARIANTS)[:1]}
    check = None if args.no_check else checker()
    analysed = [(turn, analyse_turn(turn, norm_class, variants, check)) for turn in data["turns"]]
    report = {"command": "python docs/measure/copy_rate.py " + " ".join(sys.argv[1:]), "target": data["target"],
              "backend": data["backend"], "replies_generated": data["generated"], "cpu_curve_ms": CPU_CURVE,
              "checked_positions": check.count[0] if check else 0, "tasks": {}}
    for task in (*TASKS, "overall"):
        chosen = [(t, r) for t, r in analysed if task == "overall" or t["task"] == task]
        if chosen:
            report["tasks"][task] = summarize(chosen, variants)
    print_report(report, variants)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(f"written to {args.out}", file=sys.stderr)
    return 0


def print_report(report: dict, variants: dict) -> None:
    tasks = report["tasks"]
    base = next(iter(variants))
    print(f"checked against PromptLookupDrafter at {report['checked_positions']} positions")
    print("\ncopy rate: share of reply tokens an n-gram match in the context continues correctly; span: share in "
          "runs copied from the prompt")
    print("(prefill: share of the plain reply's time spent on the prompt; ceiling: a perfect free draft, end to end)")
    print(f"{'task':<15}{'prompt':>7}{'reply':>6}{'n=1':>6}{'n=2':>6}{'n=3':>6}{'n=4':>6}{'lng>=2':>7}"
          f"{'span4':>6}{'span8':>6}{'prefill':>8}{'ceiling':>8}")
    for task, t in tasks.items():
        c = t["copy_rate"]
        print(f"{task:<15}{t['mean_prompt_tokens']:>7.0f}{t['mean_reply_tokens']:>6.0f}{c['n=1']:>6.2f}"
              f"{c['n=2']:>6.2f}{c['n=3']:>6.2f}{c['n=4']:>6.2f}{c['longest>=2']:>7.2f}{t['span>=4']:>6.2f}"
              f"{t['span>=8']:>6.2f}{t['prefill_share']:>8.2f}{t['perfect_draft_cpu']['end_to_end']:>8.2f}")
    print(f"\nlookup ({base}): proposals per position, acceptance of their first 1/2/4/8 tokens, mean accepted of"
          " up to 8 per proposal and per position; speedup with K per class by expected_tokens (decoding on the cpu"
          " and flat curves, cpu end to end with the prefill), cpu decoding with K in hindsight; oracle lookup"
          " (accepted per position, speedups with K in hindsight)")
    print(f"{'task':<15}{'prop':>5}{'acc1':>5}{'acc2':>5}{'acc4':>5}{'acc8':>5}{'run':>5}{'/pos':>5}{'cpu':>6}"
          f"{'flat':>6}{'e2e':>6}{'hind':>6} |{'/pos':>5}{'cpu':>6}{'flat':>6}{'e2e':>6}")
    for task, t in tasks.items():
        v = t["variants"][base]
        a = v["acceptance_at"]
        s, h, o = v["speedup"], v["speedup_hindsight_k"], t["oracle_lookup_speedup"]
        print(f"{task:<15}{v['proposal_rate']:>5.2f}{a[1]:>5.2f}{a[2]:>5.2f}{a[4]:>5.2f}{a[8]:>5.2f}"
              f"{v['mean_accepted_per_proposal']:>5.2f}{v['accepted_per_reply_token']:>5.2f}{s['cpu']:>6.2f}"
              f"{s['flat']:>6.2f}{s['cpu_end_to_end']:>6.2f}{h['cpu']:>6.2f} |{t['oracle_lookup_mean_run']:>5.2f}"
              f"{o['cpu']:>6.2f}{o['flat']:>6.2f}{o['cpu_end_to_end']:>6.2f}")
    if len(variants) > 1:
        for task in ("summarization", "rag", "overall"):
            if task not in tasks:
                continue
            print(f"\nvariants on {task}: proposals/position, first-token acceptance, mean accepted per proposal, "
                  "accepted per reply token, speedup cpu / flat / cpu end to end (K per class), cpu with K in "
                  "hindsight")
            for name, v in tasks[task]["variants"].items():
                print(f"  {name:<28}{v['proposal_rate']:>6.2f}{v['first_token_acceptance'] or 0:>6.2f}"
                      f"{v['mean_accepted_per_proposal']:>6.2f}{v['accepted_per_reply_token']:>6.2f}"
                      f"{v['speedup']['cpu']:>7.2f}{v['speedup']['flat']:>7.2f}{v['speedup']['cpu_end_to_end']:>7.2f}"
                      f"{v['speedup_hindsight_k']['cpu']:>7.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
