"""The engine's own work per speculative step on the GPU path's code (StaticCacheRunner, a static draft kept on the
device), run on this CPU: everything but the models' passes (the verification rule, rollback, policy, detokenizing,
events), per step, at K = 4 with the target drafting for itself (every draft accepted). docs/performance-gpu.md
quotes it.

Run: .venv/bin/python docs/measure/engine_work.py
"""

import torch

from specchat.commands.measure_costs import _NoTokenizer, random_model
from specchat.engine.backends.torch.runners import runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter

torch.set_num_threads(1)
target = random_model("tiny", torch.device("cpu"), torch.float32)
engine = SpeculativeEngine(runner_for(target, static_cache=True, compile_steps=False), _NoTokenizer(),
                           ModelDrafter(target, static=True, compile_backend=None), eos_token_ids=[])
config = GenerationConfig(max_new_tokens=200, k=4, adaptive_k=False, seed=0)
for _ in range(5):
    stats = engine.generate(list(range(5, 60)), config).stats
    steps = stats.target_passes - 1
    rule = stats.accept_s + stats.rollback_s + stats.policy_s + stats.detokenize_s
    print(f"engine work {1000 * stats.other_s / steps:.3f} ms a step (rule, rollback, policy, detokenizing "
          f"{1000 * rule / steps:.3f}; events {1000 * stats.event_s / steps:.3f}); verify {1000 * stats.verify_s / steps:.3f} ms")
