"""Tiny models and tokenizers built in milliseconds, for tests that need real (random-weight) Llamas, or a Gemma 3
with sliding-window layers.

Every model is built on the CPU in float32, whatever accelerator the machine has: the tests assert greedy replies
token for token (bit-identity), which float32 on the CPU keeps and bf16 on a GPU does not promise."""

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

DEVICE = torch.device("cpu")  # where the tiny models live, and the dtype they compute in (see above)
DTYPE = torch.float32
# The same for a model a test loads from disk (LoadOptions(**EXACT_PLACEMENT)) or through the command line
# (EXACT_ARGS): left to choose, the loader takes a GPU in bf16/fp16 where there is one.
EXACT_PLACEMENT = {"device": "cpu", "dtype": "float32"}
EXACT_ARGS = ("--device", "cpu", "--dtype", "float32")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts tokens and the target verifies them in one pass.",
    "Café, naïve, résumé: accents and emoji 🦊🚀 need several bytes each.",
    "def add(a, b):\n    return a + b\n",
    "Please summarise the following text in two sentences.",
] * 20


def build_byte_tokenizer(vocab_size: int = 320, with_eos: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (like GPT-2's and SmolLM2's), trained on a few sentences in milliseconds."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>" if with_eos else None,
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_llama(vocab_size: int, seed: int, hidden: int = 64, layers: int = 2, init: float = 0.15,
                     max_positions: int = 512) -> LlamaForCausalLM:
    """Random weights; a large init range makes next-token distributions peaked, so greedy choices are not
    near-ties that float rounding could flip."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, initializer_range=init, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    return _on_cpu_float32(LlamaForCausalLM(config))


def build_tiny_gemma3(vocab_size: int, seed: int, sliding_window: int = 8, hidden: int = 64,
                      layer_types: tuple[str, ...] = ("sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention"),
                      init: float = 0.15, max_positions: int = 512) -> Gemma3ForCausalLM:
    """A random Gemma 3 text model whose "sliding_attention" layers attend to the last `sliding_window` positions
    only (transformers gives them a cache layer of their own), mixed with full-attention layers; ids as
    build_tiny_llama's."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                              num_hidden_layers=len(layer_types), layer_types=list(layer_types), num_attention_heads=4,
                              num_key_value_heads=2, head_dim=hidden // 4, query_pre_attn_scalar=hidden // 4,
                              sliding_window=sliding_window, max_position_embeddings=max_positions,
                              initializer_range=init, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                              tie_word_embeddings=False)
    return _on_cpu_float32(Gemma3ForCausalLM(config))


def _on_cpu_float32(model):
    """`model` in eval mode on DEVICE in DTYPE, ending its replies at id 2 (the byte tokenizer's <|im_end|>)."""
    model = model.to(device=DEVICE, dtype=DTYPE).eval()
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 0
    return model


def perturbed_copy(model, noise: float, seed: int):
    """The same model (a Llama or a Gemma 3 of this file) with noisy weights: a draft that agrees with the target
    often but not always."""
    copy = type(model)(model.config).to(device=DEVICE, dtype=DTYPE).eval()
    copy.load_state_dict(model.state_dict())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise * parameter.std())
    return copy
