"""One process: the engine as `specchat bench` runs it (same loader, engine per mode), one prompt N times."""
import json, sys
from specchat.engine import LoadOptions, ModelSource, GenerationConfig, Message, build_prompt_ids
from specchat.engine.models import default_draft_for
from specchat.engine.pair import load_pair
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
