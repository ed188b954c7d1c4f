"""Do speculative replies equal plain decoding when the embedded model runs on torch in a given float format?

.venv/bin/python docs/measure/bf16_identity.py bfloat16   (or float32): 5 prompts, 96 new tokens, K=4, greedy;
prints how many of pld's and hybrid's replies are token for token plain decoding's in that format."""
import sys
import time

from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource, default_draft_for

dtype = sys.argv[1]
t = ModelSource.parse("embedded")
pair = load_pair(t, default_draft_for(t), LoadOptions(backend="torch", dtype=dtype))
print("dtype", pair.target.dtype, flush=True)
prompts = ["Explain how a bicycle works.", "Write a short poem about autumn leaves.", "List three uses of copper.",
           "Translate 'good morning' into French and Spanish.", "What is the difference between weather and climate?"]
same = {d: 0 for d in ("pld", "hybrid")}
for p in prompts:
    ids = build_prompt_ids(pair.target.tokenizer, [Message("user", p)])
    cfg = GenerationConfig(max_new_tokens=96, k=4)
    plain = pair.engine("none").generate(ids, cfg).token_ids
    for d in same:
        out = pair.engine(d).generate(ids, cfg).token_ids
        same[d] += out == plain
print("identical of", len(prompts), same, flush=True)
