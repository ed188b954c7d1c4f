"""Does the chat's load-time warm-up help or hurt the first replies? Three identical copy requests with prompt lookup,
on an engine warmed up as the app warms one at load (ChatSession._calibrate and _warm_up) and on a cold one.

    .venv/bin/python docs/measure/warm_engine_copy.py [--target embedded] [--drafter pld] [--replies 3]

For each reply: its tokens, τ (tokens per target pass), how many steps ran each K (steps_by_k: index 0 is plain
steps) and the drafts proposed and accepted, then the warmed engine's measured verification costs (ms by size).
The findings of 2026-12-01 are in issue 30's closing note (docs/performance.md has the policy's design).
"""

import argparse

from specchat.engine.chat_engine import EngineCache, reply_to
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource
from specchat.ui.session import ChatSession

COPY = [Message("user", "Repeat exactly: The quick brown fox jumps over the lazy dog. The quick brown fox jumps over "
                        "the lazy dog.")]


def replies(engines: EngineCache, drafter: str, count: int) -> None:
    for i in range(count):
        result = reply_to(engines.chat_engine(drafter), COPY, None, GenerationConfig(max_new_tokens=120))
        s = result.stats
        print(f"  reply {i}: {s.new_tokens} tokens, tau {s.tau:.2f}, steps_by_k {s.steps_by_k}, "
              f"proposed {s.draft_proposed}, accepted {s.draft_accepted}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", default="pld")
    parser.add_argument("--replies", type=int, default=3)
    args = parser.parse_args()
    pair = load_pair(ModelSource.parse(args.target), None, LoadOptions())
    warm = EngineCache(pair)
    ChatSession._calibrate(warm, None)
    ChatSession._warm_up(warm, args.drafter, None)
    costs = warm.engine(args.drafter).step_costs.verify
    print("warmed at load, verify ms by size:", {n: round(s * 1000, 2) for n, s in sorted(costs.items())})
    replies(warm, args.drafter, args.replies)
    print("cold engine:")
    replies(EngineCache(pair), args.drafter, args.replies)


if __name__ == "__main__":
    main()
