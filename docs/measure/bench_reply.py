"""One process: the engine as `specchat bench` runs it (same loader, engine per mode), one prompt N times."""
import json
import sys

from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource, default_draft_for

prompt, repeats, drafter = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = ModelSource.parse("embedded")
pair = load_pair(t, default_draft_for(t))
ids = build_prompt_ids(pair.target.tokenizer, [Message("user", prompt)])
e = pair.engine(drafter)
e.generate(ids, GenerationConfig(max_new_tokens=16, seed=0))
out = []
for i in range(repeats):
    r = e.generate(ids, GenerationConfig(max_new_tokens=128, seed=0))
    out.append(round(len(r.token_ids) / r.stats.wall_s, 2))
print(json.dumps(out))
