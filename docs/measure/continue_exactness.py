"""A greedy reply cut after N tokens and continued, against the reply never cut, on the embedded GGUF (llama.cpp):
continued as the chat continues it (SpeculativeEngine.stream's `continuing`: the reply's tokens read after the prompt
in decoding passes) and naively (the prompt and the reply's tokens read as one prompt). docs/how-it-works.md,
"Continuing a reply".

    .venv/bin/python docs/measure/continue_exactness.py

Prints, for each drafter, question and cut, whether each continuation equals the uninterrupted reply's tokens and
at which new token the naive one parts from it.
"""

import os

os.environ.setdefault("SPECCHAT_MEASURE_NOW", "1")  # the kernel verdict and cost curve now, not beside the replies

from specchat.engine.chat_prompt import Message, build_prompt_ids  # noqa: E402
from specchat.engine.decoding.speculative import GenerationConfig  # noqa: E402
from specchat.engine.loading.load import LoadOptions  # noqa: E402
from specchat.engine.loading.pair import load_pair  # noqa: E402
from specchat.models.sources import ModelSource, default_draft_for  # noqa: E402

QUESTIONS = ("Write a short story about a robot who learns to paint.", "Explain how a bicycle stays upright.",
             "List five uses of a paperclip, one sentence each.")
MORE = 48  # tokens after the cut


def config(tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=tokens, k=4, adaptive_k=False)


def main() -> None:
    target = ModelSource.parse("embedded")
    pair = load_pair(target, default_draft_for(target), LoadOptions(backend="llama.cpp", device="cpu"))
    pair.target.native.settle()
    print(pair.target.native.kernels)
    for drafter in ("none", "pld"):
        engine = pair.engine(drafter)
        for question in QUESTIONS:
            ids = build_prompt_ids(pair.target.tokenizer, [Message("user", question)])
            for cut_at in (8, 24):
                whole = engine.generate(ids, config(cut_at + MORE)).token_ids[cut_at:]
                cut = engine.generate(ids, config(cut_at))
                ours = engine.generate(ids, config(MORE), continuing=cut.token_ids).token_ids
                naive = engine.generate(list(ids) + list(cut.token_ids), config(MORE)).token_ids
                parts = next((i for i, (a, b) in enumerate(zip(naive, whole)) if a != b), None)
                print(f"{drafter:5} {question[:24]:24} cut at {cut_at:2}: continuing {ours == whole}, "
                      f"naive {naive == whole} (parts at new token {parts})")


if __name__ == "__main__":
    main()
