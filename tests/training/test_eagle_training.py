"""Training the attending draft head: the unrolled training forward is exactly what drafting computes, and the
target's hidden states are recorded for every position."""

import pytest
import torch

from specchat.engine.drafting.eagle_network import EagleHead, HeadShape
from specchat.training.distill import Example
from specchat.training.eagle_head import Sequences, staged_states, teacher_features


@pytest.fixture(scope="module")
def attending_head():
    torch.manual_seed(0)
    shape = HeadShape(hidden=32, inner=48, blocks=1, vocab=16, heads=4, kv_heads=2, head_dim=8)
    return EagleHead(shape).eval()


def test_each_unrolled_stage_equals_drafting_with_the_cache(attending_head):
    """Stage j at position p is the chain that starts from the target's state at s = p - j: the head extended over
    the verified positions 0..s, then j drafted positions fed its own predictions (the true next tokens)."""
    head, T = attending_head, 9
    features, embeddings = torch.randn(1, T, 32), torch.randn(1, T, 32)
    with torch.no_grad():
        stages = staged_states(head, features, embeddings, 3)
        for j in range(3):
            for p in range(j, T):
                s = p - j
                cache = head.new_cache(4)
                state = head.extend(features[0, : s + 1], embeddings[0, : s + 1], cache, last_only=True)
                for i in range(1, j + 1):
                    state = head.extend(state, embeddings[0, s + i : s + i + 1], cache)
                torch.testing.assert_close(state[0], stages[j][0, p], atol=1e-5, rtol=1e-5)


def test_prompt_and_reply_states_cover_every_position(target):
    examples = [Example(list(range(5, 17)), 5, "qa"), Example(list(range(30, 39)), 1, "qa"),
                Example(list(range(40, 60)), 8, "chat")]
    prompts = teacher_features(target, examples, span="prompt")
    replies = teacher_features(target, examples, span="reply")
    sequences = Sequences(examples, prompts, replies)
    for example, joined in zip(examples, sequences.features):
        with torch.no_grad():
            hidden = target.get_decoder()(input_ids=torch.tensor([example.ids])).last_hidden_state[0]
        torch.testing.assert_close(joined.float(), hidden, atol=2e-3, rtol=2e-3)  # stored as float16
    with pytest.raises(ValueError, match="span"):
        teacher_features(target, examples, span="everything")
