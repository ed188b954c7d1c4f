"""Plain decoding deep in a document, on the embedded GGUF: tokens a second after the first token, for a reply to a
question about a 4,000-token document (two SQuAD 2.0 articles, as docs/measure/follow_up_first_token.py), against
llama-cpp-python on the same file, prompt and 2 threads with its defaults. docs/performance.md, "Decoding deep in a
document".

    .venv/bin/python docs/measure/decoding_at_depth.py [--peer]

Each run reads the document once and then times REPLIES greedy replies of up to 128 tokens to questions about it
(the prompt's reading left out: only the decoding after the first token counts). Run the old tree and the new one
in turn (PYTHONPATH=the other tree) for a side-by-side ratio.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["SPECCHAT_STATE_MEMORY_MIB"] = "0"  # no state kept: nothing in the idle time beside the timing
os.environ["SPECCHAT_CACHE_DIR"] = tempfile.mkdtemp(prefix="specchat-depth-")
for kept in ("costs.json", "kernels.json"):  # the measured curve and verdict, so that nothing is measured here
    source = Path.home() / ".cache" / "specchat" / kept
    if source.exists():
        (Path(os.environ["SPECCHAT_CACHE_DIR"]) / kept).write_bytes(source.read_bytes())
sys.path.insert(0, str(Path(__file__).resolve().parent))

from follow_up_first_token import documents, load  # noqa: E402

from specchat.engine.chat_prompt import Message, build_prompt_ids  # noqa: E402
from specchat.engine.decoding.speculative import GenerationConfig  # noqa: E402

QUESTIONS = ["Summarise what the text says about the Amazon rainforest's tree species, in detail.",
             "Describe in detail how the Black Death spread across Europe, according to the text."]
NEW_TOKENS = 128


def ours() -> list[float]:
    pair = load()
    pair.target.native.settle()
    engine = pair.engine("none")
    tokenizer = pair.target.tokenizer
    doc, _ = documents()
    rates = []
    for question in QUESTIONS:
        ids = build_prompt_ids(tokenizer, [Message("user", doc + "\n\n" + question)])
        start, first = time.perf_counter(), None
        for event in engine.stream(ids, GenerationConfig(max_new_tokens=NEW_TOKENS)):
            first = first or time.perf_counter()
            if event.result is not None:
                rates.append((len(event.result.token_ids) - 1) / (time.perf_counter() - first))
    return rates


def peer() -> list[float]:
    import llama_cpp
    import numpy as np

    from specchat.engine.backends.llamacpp.extra_buffers import peer_llama
    from specchat.models.sources import embedded_model_file

    tokenizer = load().target.tokenizer
    llm = peer_llama(model_path=str(embedded_model_file()), n_ctx=8192, n_threads=2, n_threads_batch=2,
                     verbose=False)
    doc, _ = documents()
    rates = []
    for question in QUESTIONS:
        ids = build_prompt_ids(tokenizer, [Message("user", doc + "\n\n" + question)])
        llm.reset()
        llm.eval(ids)
        first, out = time.perf_counter(), []
        while len(out) < NEW_TOKENS:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            out.append(int(logits.argmax()))
            if out[-1] in (llm.token_eos(), 2) or len(out) == NEW_TOKENS:
                break
            llm.eval(out[-1:])
        rates.append((len(out) - 1) / (time.perf_counter() - first))
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="store_true")
    args = parser.parse_args()
    rates = peer() if args.peer else ours()
    print(json.dumps({"mode": "llama-cpp-python" if args.peer else "ours",
                      "tok/s after the first token": [round(r, 1) for r in rates]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
