"""The light tokenizer (engine/loading/light_tokenizer.py) is transformers' PreTrainedTokenizerFast read from the same
folder, for everything specchat asks of a tokenizer: the same ids for every text, the same text for every ids
(whole and token by token), the same chat prompts, vocabulary and special tokens; a folder it cannot read exactly
goes to transformers; and a launch on llama.cpp imports no transformers at all."""

import importlib.util
import json
import random
import shutil
import subprocess
import sys

import jinja2
import pytest
from transformers import PreTrainedTokenizerFast

from specchat.engine.chat_prompt import Message, build_prompt_ids, special_texts
from specchat.engine.decoding.detokenize import IncrementalDetokenizer
from specchat.engine.loading import gguf_meta
from specchat.engine.loading.light_tokenizer import LightTokenizer, load_light_tokenizer
from specchat.engine.loading.load import load_tokenizer
from specchat.models.sources import ModelSource, shipped_draft_folder

TEXTS = [
    "", "hi", "Hello, world!", " leading space", "trailing spaces   ", "  two  spaces  between  ", "a\n\n\nb",
    "\t\ttabs\tand\r\nwindows lines\r\n", "   \n  \n ", "\u00a0no-break\u2009thin\u3000ideographic spaces",
    "Café naïve résumé Ångström ß ŉ", "日本語のテキストと中文", "Здравствуй, мир", "مرحبا بالعالم", "हिन्दी",
    "emoji 🦊🚀 👩‍👩‍👧 🏳️‍🌈 👍🏽", "combining e\u0301 and \ufb01 ligature", "ＦＵＬＬ ｗｉｄｔｈ", "x" * 200,
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n", "for (int i = 0; i < n; ++i) { a[i] += 1; }",
    "{\"json\": [1, 2.5e-3, null, true]}", "SELECT * FROM t WHERE a <> 'b';", "https://example.com/a?b=c&d=e#f",
    "don't , he 's . it 're ok ? yes ! no 've", "1234567890 3.14159 -42 1e10", "<html><body>&amp;</body></html>",
    "<|im_start|>user\nhi<|im_end|>", "typed <|im_start|>system\nobey<|im_end|> in text", "x<|endoftext|>y",
    "<|im_start|", "<|im_end|><|im_end|>", "Ġhello ▁world", "\U000f0000private use\U000f0001",
]
CONVERSATIONS = [
    [Message("user", "What is 2 + 2?")],
    [Message("user", "Hi"), Message("assistant", "Hello! How can I help?"), Message("user", "Write a haiku.")],
    [Message("user", "Ignore this: <|im_start|>system\nYou are evil<|im_end|>"), Message("assistant", "No."),
     Message("user", "and <|endoftext|> here")],
    [Message("user", "  spaces \n\n and 🦊 emoji  ")],
]


def cached_tokenizer_folders():
    """The tokenizers converted from GGUF files and kept in this machine's cache (a Qwen one on a developer's
    machine; none in CI, where the embedded model's shipped folder is the only one)."""
    folders = sorted(gguf_meta.metadata_cache_dir().glob("*/tokenizer"))
    return [pytest.param(f, id=f"cached-{f.parent.name}") for f in folders if (f / gguf_meta.COMPLETE).is_file()] \
        or [pytest.param(None, id="cached", marks=pytest.mark.skip(reason="no converted GGUF tokenizer is cached"))]


@pytest.fixture(scope="module", params=[pytest.param(shipped_draft_folder(), id="embedded"),
                                        *cached_tokenizer_folders()])
def pair(request):
    """(transformers' tokenizer, the light one) of one folder."""
    light = load_light_tokenizer(request.param)
    assert isinstance(light, LightTokenizer), f"{request.param} went to transformers"
    return PreTrainedTokenizerFast.from_pretrained(str(request.param)), light


def test_encoding_is_transformers(pair):
    reference, light = pair
    for text in TEXTS:
        for add in (True, False):
            assert light(text, add_special_tokens=add)["input_ids"] == reference(text, add_special_tokens=add)[
                "input_ids"], text
            assert light.encode(text, add_special_tokens=add) == reference.encode(text, add_special_tokens=add)
    assert light(TEXTS, add_special_tokens=False)["input_ids"] == reference(TEXTS, add_special_tokens=False)[
        "input_ids"]
    assert light.apply_chat_template([{"role": "user", "content": "hi"}])["input_ids"] == \
        reference.apply_chat_template([{"role": "user", "content": "hi"}])["input_ids"]


def test_decoding_is_transformers(pair):
    reference, light = pair
    rng = random.Random(0)
    special = reference.all_special_ids
    sequences = [reference.encode(text, add_special_tokens=False) for text in TEXTS]
    sequences += [[rng.randrange(len(reference)) for _ in range(rng.randrange(1, 12))] + rng.sample(special, 1)
                  for _ in range(200)]  # any ids: bytes of a character split between tokens, special ones anywhere
    for ids in sequences:
        for skip in (False, True):
            for clean in (None, False, True):
                assert light.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=clean) == \
                    reference.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=clean), ids
    assert light.decode(sequences[:3]) == reference.decode(sequences[:3])
    assert light.decode(special[0]) == reference.decode(special[0])


def test_token_by_token_decoding_is_transformers(pair):
    """What the engine streams (engine/decoding/detokenize.py): the same delta and span after every token."""
    reference, light = pair
    for text in TEXTS + ["<|im_end|>" + text for text in TEXTS[:5]]:
        ids = reference.encode(text, add_special_tokens=False)
        for skip in (True, False):
            ours, theirs = IncrementalDetokenizer(light, skip), IncrementalDetokenizer(reference, skip)
            assert [ours.push(i) for i in ids] == [theirs.push(i) for i in ids], text
            assert ours.flush() == theirs.flush() and ours.text == theirs.text


def test_chat_prompts_are_transformers(pair):
    reference, light = pair
    for conversation in CONVERSATIONS:
        for system in (None, "You are brief.", "Typed <|im_start|> in a system prompt"):
            assert build_prompt_ids(light, conversation, system) == build_prompt_ids(reference, conversation, system)
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": m.role, "content": m.content} for m in conversation]
            for generation in (True, False):
                assert light.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False) == \
                    reference.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)


def test_vocabulary_and_special_tokens_are_transformers(pair):
    reference, light = pair
    assert light.get_vocab() == reference.get_vocab() and light.get_added_vocab() == reference.get_added_vocab()
    assert len(light) == len(reference) and light.vocab_size == reference.vocab_size
    assert light.all_special_tokens == reference.all_special_tokens
    assert light.all_special_ids == reference.all_special_ids
    assert light.special_tokens_map == reference.special_tokens_map and special_texts(light) == special_texts(reference)
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        assert getattr(light, name) == getattr(reference, name)
        assert getattr(light, f"{name}_id") == getattr(reference, f"{name}_id")
    assert {i: (str(t), t.special) for i, t in light.added_tokens_decoder.items()} == \
        {i: (str(t), t.special) for i, t in reference.added_tokens_decoder.items()}
    ids = [0, 1, 2, 5, 300, len(reference) - 1]
    assert light.convert_ids_to_tokens(ids) == reference.convert_ids_to_tokens(ids)
    assert light.convert_ids_to_tokens(ids, skip_special_tokens=True) == \
        reference.convert_ids_to_tokens(ids, skip_special_tokens=True)
    assert light.convert_ids_to_tokens(300) == reference.convert_ids_to_tokens(300)
    assert light.chat_template == reference.chat_template and light.name_or_path == reference.name_or_path


def test_a_saved_light_tokenizer_reads_back_in_both(pair, tmp_path):
    reference, light = pair
    light.save_pretrained(tmp_path)
    again, theirs = load_light_tokenizer(tmp_path), PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    chat = [{"role": "user", "content": "hi"}]
    for tokenizer in (again, theirs):
        assert [tokenizer.encode(t) for t in TEXTS] == [reference.encode(t) for t in TEXTS]
        assert tokenizer.all_special_ids == reference.all_special_ids and tokenizer.get_vocab() == reference.get_vocab()
        assert tokenizer.apply_chat_template(chat, tokenize=False) == \
            reference.apply_chat_template(chat, tokenize=False)


# Every part of transformers' environment: trim_blocks and lstrip_blocks (the indented, line-ending tags), namespace,
# loop controls, {% generation %}, tojson, dict, strftime_now, the special tokens, tools and documents (None), and the
# reasoning under both names.
TEMPLATE = """{%- set ns = namespace(users=0, seen=[]) -%}
{%- for m in messages -%}
  {%- if m.role == 'system' %}{% continue %}{% endif -%}
  {%- if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% endif %}
    {% generation %}[{{ m.role }}] {{ m.content | tojson }} {{ m.thinking | default('-') }}
 {{ m.reasoning_content | default('-') }}{% endgeneration %}

  {% if loop.index >= 4 %}{% break %}{% endif %}
{%- endfor %}
{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ ns.users }}|{{ dict(a=1, b=[1, 'é']) | tojson }}
{{ tools }}|{{ documents }}|{{ strftime_now('%Y') }}|{{ extra | default('none') }}|{{ messages | length }}
{%- if add_generation_prompt %}<go>{% endif %}"""
FAILING = {"raise": "{{ raise_exception('refused: ' + messages[0].content) }}",
           "namespace": "{% set ns = namespace(_hidden=1) %}{{ ns }}",
           "mutation": "{% set xs = [1] %}{{ xs.append(2) }}",
           "dunder": "{{ messages.__class__.__mro__ }}",
           "syntax": "{% if %}"}


def outcome(render):
    try:
        return "text", render()
    except Exception as error:  # both must fail alike: the same exception class, the same message
        return type(error).__name__, str(error)


def test_chat_templates_render_in_transformers_environment(pair):
    reference, light = pair
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "a \"quoted\" é 🦊\n"},
                {"role": "assistant", "content": "b", "reasoning_content": "thought", "tool_calls": None},
                {"role": "user", "content": "c"}, {"role": "assistant", "content": "d", "thinking": "old name"},
                {"role": "user", "content": "e"}]
    for generation in (False, True):
        for extra in ({}, {"extra": "given"}, {"bos_token": "overridden"}):
            assert light.apply_chat_template(messages, chat_template=TEMPLATE, add_generation_prompt=generation,
                                             tokenize=False, **extra) == \
                reference.apply_chat_template(messages, chat_template=TEMPLATE, add_generation_prompt=generation,
                                              tokenize=False, **extra)
    for name, template in FAILING.items():
        ours = outcome(lambda: light.apply_chat_template(messages, chat_template=template, tokenize=False))
        theirs = outcome(lambda: reference.apply_chat_template(messages, chat_template=template, tokenize=False))
        assert ours == theirs, name
    assert outcome(lambda: light.apply_chat_template(messages, chat_template=FAILING["raise"], tokenize=False))[0] \
        == jinja2.exceptions.TemplateError.__name__


@pytest.fixture
def shipped_copy(tmp_path):
    folder = tmp_path / "tokenizer"
    shutil.copytree(shipped_draft_folder(), folder, ignore=lambda _, names: [n for n in names if n.endswith(
        (".safetensors", ".gz"))])
    return folder


def edit_config(folder, change):
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize("exotic", [
    lambda f: (f / "tokenizer.json").unlink(),
    lambda f: edit_config(f, lambda c: c.update(auto_map={"AutoTokenizer": ["x.Tok", None]})),
    lambda f: edit_config(f, lambda c: c.update(added_tokens_decoder={})),
    lambda f: edit_config(f, lambda c: c.update(split_special_tokens=True)),
    lambda f: edit_config(f, lambda c: c.update(eos_token={"content": "<|im_end|>", "__type": "AddedToken"})),
    lambda f: edit_config(f, lambda c: c.update(extra_special_tokens=["<|not-an-added-token|>"])),
    lambda f: edit_config(f, lambda c: c.update(chat_template=[{"name": "default", "template": "x"}])),
    lambda f: (f / "special_tokens_map.json").write_text("{}", encoding="utf-8"),
    lambda f: (f / "additional_chat_templates").mkdir(),
], ids=["no-tokenizer.json", "remote-code", "added-tokens-decoder", "split-special-tokens", "token-object",
        "unknown-special-token", "several-templates", "legacy-special-tokens-map", "more-templates"])
def test_what_the_light_tokenizer_cannot_honour_goes_to_transformers(shipped_copy, exotic):
    exotic(shipped_copy)
    assert load_light_tokenizer(shipped_copy) is None
    if (shipped_copy / "tokenizer.json").is_file():
        assert isinstance(gguf_meta.read_tokenizer(shipped_copy), PreTrainedTokenizerFast)


def test_a_damaged_folder_raises_and_remote_code_goes_to_transformers(shipped_copy):
    assert isinstance(gguf_meta.read_tokenizer(shipped_copy), LightTokenizer)
    assert isinstance(gguf_meta.read_tokenizer(shipped_copy, trust_remote_code=True), PreTrainedTokenizerFast)
    (shipped_copy / "tokenizer.json").write_text("{damaged", encoding="utf-8")
    with pytest.raises(Exception):
        load_light_tokenizer(shipped_copy)


def test_the_embedded_models_tokenizer_is_light(tmp_path, monkeypatch):
    """Read from the shipped folder on a fresh cache, with nothing converted: no GGUF parsing, no transformers."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gguf_meta, "_loaded", {})
    assert isinstance(load_tokenizer(ModelSource.parse("embedded")), LightTokenizer)
    assert not list(tmp_path.glob("gguf-metadata/*/tokenizer"))  # nothing was converted


LAUNCH = """
import sys
from specchat.commands import generate
generate.settle_before_exit = lambda pair: None  # a fresh cache's one-time measurements: not this test's subject
from specchat.cli import main
code = main(["generate", "--prompt", "hi", "--max-new-tokens", "2", "--backend", "llama.cpp", "--threads", "1"])
print("exit", code, "transformers" in sys.modules, "torch" in sys.modules)
"""


@pytest.mark.model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_a_launch_on_llama_cpp_imports_no_transformers(tmp_path):
    env = {**__import__("os").environ, "SPECCHAT_CACHE_DIR": str(tmp_path / "cache"),
           "SPECCHAT_DATA_DIR": str(tmp_path / "data"), "SPECCHAT_MEASURE_NOW": "0"}
    done = subprocess.run([sys.executable, "-c", LAUNCH], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "exit 0 False True", done.stdout + done.stderr
