"""The time to the first token of a follow-up about a long document, against a question with no document, on the
embedded GGUF (llama.cpp, plain decoding): right after the first turn, after a turn in another chat, and after a
restart. docs/performance.md, "Time to the first token of a follow-up"; docs/how-it-works.md, "Per-chat states".

    .venv/bin/python docs/measure/follow_up_first_token.py [--before | --peer]

--before: the reader as it was before reading ahead (no turn read in the idle time, passes cut every 256
positions only), for a side-by-side run. --peer: llama-cpp-python on the same file, 2 threads, its defaults, its
cache kept between turns (it reuses the previous reply's positions, which it may: it promises no bit-identity), for
(a) and the question with no document. Each mode uses a fresh state folder of its own. Between turns the script
waits, as a user reading the answer would, until the model's idle-time work is done (core/one_time.py).
"""

import argparse
import gc
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["SPECCHAT_MEASURE_NOW"] = "0"  # idle-time work in the background, as in the app
os.environ["SPECCHAT_CACHE_DIR"] = tempfile.mkdtemp(prefix="specchat-follow-up-")  # no state kept from earlier runs
for kept in ("costs.json", "kernels.json"):  # the measured curve and verdict, so that nothing is measured here
    source = Path.home() / ".cache" / "specchat" / kept
    if source.exists():
        (Path(os.environ["SPECCHAT_CACHE_DIR"]) / kept).write_bytes(source.read_bytes())

from specchat.engine.backends.llamacpp import llama_runner, state_shelf  # noqa: E402
from specchat.engine.chat_engine import LocalChatEngine  # noqa: E402
from specchat.engine.chat_prompt import Message  # noqa: E402
from specchat.engine.decoding.speculative import GenerationConfig  # noqa: E402
from specchat.engine.loading.load import LoadOptions  # noqa: E402
from specchat.engine.loading.pair import load_pair  # noqa: E402
from specchat.models.sources import ModelSource  # noqa: E402

SUITE = Path(__file__).resolve().parents[2] / "resources" / "doc_suite" / "squad2-documents.jsonl.gz"
CONFIG = GenerationConfig(max_new_tokens=96)


def documents() -> tuple[str, str]:
    """A document of about 4,000 tokens (two SQuAD 2.0 articles, CC BY-SA 4.0) and another one for chat B."""
    rows = {(r["title"], r["tokens"]): r["document"] for r in map(json.loads, gzip.open(SUITE, "rt"))}
    return (rows[("Amazon rainforest", 1849)] + "\n\n" + rows[("Black Death", 2174)],
            rows[("Civil disobedience", 1776)])


def load():
    target = ModelSource.parse("embedded")
    return load_pair(target, None, LoadOptions(backend="llama.cpp", device="cpu"))


def first_token(engine, messages: list[Message], times: dict[str, float] | None = None,
                name: str = "") -> tuple[float, str]:
    """Seconds from asking to the first token (fitting the prompt included), and the whole reply's text; with
    `times`, the first token's and the second's seconds are kept there under `name` and `name + ", 2nd token"`
    (the second waits for whatever the first did not: the prompt's state moving into the decoding context)."""
    start, first, second = time.perf_counter(), None, None
    for event in engine.stream(messages, None, CONFIG):
        now = time.perf_counter() - start
        if first is not None and second is None and event.token_ids:
            second = now
        first = first or now
        if event.result is not None:
            stats = event.result.stats
            if os.environ.get("FOLLOW_UP_DEBUG"):
                print(f"  prompt {stats.prompt_tokens} reused {stats.prompt_reused} restored {stats.prompt_restored}"
                      f" prefill {stats.prefill_s:.3f} s first {first:.3f} s", file=sys.stderr)
            if times is not None:
                times[name], times[name + ", 2nd token"] = first, second or now
            return first, event.result.text
    raise RuntimeError("no result")


def idle(pair) -> None:
    """Waits, as a user reading the answer, until the model's idle-time work (reading ahead, keeping states) is done."""
    time.sleep(1.5)
    while pair.target.native.one_time.owed():
        time.sleep(0.1)
    time.sleep(0.2)


def run(before: bool) -> dict[str, float]:
    if before:  # every pass 256 positions, none cut at a turn's end, and nothing read ahead
        llama_runner.LlamaCppModel.turn_end_ids = frozenset()
        llama_runner.LlamaCppRunner.read_ahead = lambda self, tokens: None
    doc_a, doc_b = documents()
    pair = load()
    pair.target.native.settle()
    engine = LocalChatEngine(pair.engine("none"))
    times: dict[str, float] = {}
    plain = [Message("user", "Name three large rivers of South America.")]
    chat_a = [Message("user", doc_a + "\n\nHow many tree species were found in one square kilometer of Ecuadorian "
                      "rainforest in 2001?")]
    _, reply = first_token(engine, chat_a)
    chat_a += [Message("assistant", reply), Message("user", "Where is that rainforest?")]
    idle(pair)
    _, _ = first_token(engine, plain, times, "no document")
    idle(pair)
    _, reply = first_token(engine, chat_a, times, "(a) right after")
    chat_a += [Message("assistant", reply), Message("user", "When did the Black Death reach Europe?")]
    idle(pair)
    first_token(engine, [Message("user", doc_b + "\n\nWhat was the result of the disobedience protesting the "
                                 "nuclear site?")])
    idle(pair)
    _, reply = first_token(engine, chat_a, times, "(b) after chat B")
    chat_a += [Message("assistant", reply), Message("user", "Which animals carried it?")]
    idle(pair)
    del engine, pair
    gc.collect()  # the model and its contexts freed, as at an exit
    state_shelf._shelves.clear()  # a new process: the same state folder, nothing in memory
    pair = load()
    engine = LocalChatEngine(pair.engine("none"))
    _, _ = first_token(engine, plain, times, "no document, restarted")
    idle(pair)
    _, _ = first_token(engine, chat_a, times, "(c) after a restart")
    return times


def peer() -> dict[str, float]:
    """llama-cpp-python's times for (a) and for the question with no document, greedy, on the same token ids."""
    import llama_cpp
    import numpy as np

    from specchat.engine.backends.llamacpp.extra_buffers import peer_llama
    from specchat.engine.chat_prompt import build_prompt_ids
    from specchat.models.sources import embedded_model_file

    tokenizer = load().target.tokenizer
    llm = peer_llama(model_path=str(embedded_model_file()), n_ctx=8192, n_threads=2, n_threads_batch=2,
                     verbose=False)

    def first_token(ids: list[int]) -> float:
        start = time.perf_counter()
        common = next((i for i, (a, b) in enumerate(zip(llm.input_ids[:llm.n_tokens], ids)) if a != b),
                      min(llm.n_tokens, len(ids)))
        llm.n_tokens = min(common, len(ids) - 1)
        llm.eval(ids[llm.n_tokens:])
        return time.perf_counter() - start

    def reply() -> list[int]:
        out = []
        while len(out) < CONFIG.max_new_tokens:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            out.append(int(logits.argmax()))
            if out[-1] in (llm.token_eos(), 2):
                break
            llm.eval(out[-1:])
        return out

    doc_a, _ = documents()
    chat_a = [Message("user", doc_a + "\n\nHow many tree species were found in one square kilometer of Ecuadorian "
                      "rainforest in 2001?")]
    first_token(build_prompt_ids(tokenizer, chat_a))
    text = tokenizer.decode(reply(), skip_special_tokens=True)
    chat_a += [Message("assistant", text), Message("user", "Where is that rainforest?")]
    times = {"(a) right after": first_token(build_prompt_ids(tokenizer, chat_a))}
    llm.reset()
    times["no document"] = first_token(build_prompt_ids(tokenizer, [Message("user", "Name three large rivers of "
                                                                              "South America.")]))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", action="store_true")
    parser.add_argument("--peer", action="store_true")
    args = parser.parse_args()
    times = peer() if args.peer else run(args.before)
    print(json.dumps({"mode": "llama-cpp-python" if args.peer else "before" if args.before else "read ahead",
                      "seconds": {k: round(v, 3) for k, v in times.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
