"""First replies of fresh processes: the default drafter against plain decoding, each reply a fresh `specchat
generate` (the kept curve and kernel verdict, nothing else), the two alternated prompt by prompt, on the first turns
of 20 Spec-Bench questions (every 24th line of resources/spec_bench/question.jsonl). Prints each pair and the
overall ratio: total tokens over the replies' total seconds (the prompt's reading included), default over plain.
The per-chat state shelf is off (SPECCHAT_STATE_MEMORY_MIB=0): with it, the second reply of a pair would restore
from disk the prompt the first one read, as a first reply to a new question never can.
docs/performance.md, "First replies on the Qwen pair".

    .venv/bin/python docs/measure/first_replies.py [--target SRC] [--max-new-tokens N] [--prompts N]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

QUESTIONS = Path(__file__).resolve().parents[2] / "resources" / "spec_bench" / "question.jsonl"


def reply(target: str, prompt: str, max_new_tokens: int, plain: bool) -> tuple[int, float, float]:
    """(tokens, seconds, tau) of one reply in a fresh process."""
    command = [sys.executable, "-m", "specchat", "generate", "--json", "--target", target,
               "--max-new-tokens", str(max_new_tokens), "--prompt", prompt] + (["--drafter", "none"] if plain else [])
    environment = dict(os.environ, SPECCHAT_STATE_MEMORY_MIB="0")
    record = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=environment).stdout)
    stats = record["stats"]
    return stats["new_tokens"], stats["wall_s"], stats.get("tau") or 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args()
    lines = QUESTIONS.read_text().splitlines()[::24][: args.prompts]
    totals = {True: [0, 0.0], False: [0, 0.0]}
    for number, line in enumerate(lines, 1):
        prompt = json.loads(line)["turns"][0]
        figures = {}
        for plain in (False, True):
            tokens, seconds, tau = reply(args.target, prompt, args.max_new_tokens, plain)
            totals[plain][0] += tokens
            totals[plain][1] += seconds
            figures[plain] = (tokens, seconds, tau)
        (dt, ds, tau), (pt, ps, _) = figures[False], figures[True]
        print(f"{number:2}  default {dt:3} tokens {ds:6.2f} s (tau {tau:.2f})  plain {pt:3} tokens {ps:6.2f} s  "
              f"{(dt / ds) / (pt / ps):.2f}x", flush=True)
    (dt, ds), (pt, ps) = totals[False], totals[True]
    print(f"overall: default {dt / ds:.2f} tok/s, plain {pt / ps:.2f} tok/s, {(dt / ds) / (pt / ps):.3f}x")


if __name__ == "__main__":
    main()
