"""/continue in the terminal chat: the last reply, cut by the token limit, goes on as a higher limit would have made
it, and nothing else does."""

import io

import pytest
import torch

from specchat.commands.terminal import TerminalChat
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource


@pytest.fixture(scope="module")
def endless(target):
    """The tiny target without an end-of-turn token, its tokenizer too: its replies run to the token limit."""
    from tiny_models import build_byte_tokenizer
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(target.config).eval()
    model.load_state_dict(target.state_dict())
    model.generation_config.eos_token_id = None
    loaded = LoadedModel(ModelSource("folder", "tiny"), model, build_byte_tokenizer(with_eos=False),
                         torch.device("cpu"), torch.float32)
    return ModelPair(loaded, loaded)  # its own draft: every proposal accepted


def test_continue_in_the_terminal_goes_on_with_a_reply_the_limit_cut(endless):
    commands = io.StringIO("/continue\nThe quick brown fox\n/continue\n/continue\n/new\n/continue\n/quit\n")
    out = io.StringIO()
    config = GenerationConfig(max_new_tokens=6, k=4, adaptive_k=False)
    chat = TerminalChat(endless, "model", config, inp=commands, out=out)
    chat.loop()
    text = out.getvalue()
    assert text.count("assistant (continued)> ") == 2 and text.count("(nothing to continue") == 2
    assert text.count("hit the token limit") == 3  # the reply, then each part


def test_the_continued_reply_is_the_longer_one(endless):
    out = io.StringIO()
    chat = TerminalChat(endless, "model", GenerationConfig(max_new_tokens=6, k=4, adaptive_k=False),
                        inp=io.StringIO("The quick brown fox\n/continue\n/continue\n/quit\n"), out=out)
    prompt = chat.engine.fit([Message("user", "The quick brown fox")], None, 6).ids
    whole = chat.engine.engine.generate(prompt, GenerationConfig(max_new_tokens=18, k=4, adaptive_k=False))
    chat.loop()
    assert chat.history[-1] == Message("assistant", whole.text) and chat.cut[1] == whole.token_ids
