"""A saved tokenizer read without transformers: the `tokenizers` library's tokenizer.json, with the special tokens of
tokenizer_config.json and the chat template of chat_template.jinja, offering the part of transformers' tokenizer
API that specchat uses.

A GGUF model on llama.cpp needs transformers for nothing but its tokenizer, and importing transformers (with what
its tokenizer classes import in turn) takes seconds at every launch; a tokenizers object reads the same file in
milliseconds. Everything here does what transformers 5's PreTrainedTokenizerFast (TokenizersBackend) does with the
same folder, which is how engine/loading/gguf_meta.py read it before: the same ids (`tokenizers` encodes and
decodes, as under transformers), the same special tokens, and the chat template rendered as
transformers.utils.chat_template_utils renders it (a sandboxed, immutable jinja2 environment with trim_blocks and
lstrip_blocks, loop controls, its tojson filter, raise_exception, strftime_now, and the special tokens as
variables). tests/engine/test_light_tokenizer.py holds the two to each other.

A folder this class cannot read exactly as transformers would (no tokenizer.json, a tokenizer_config.json key it
does not know, legacy token files, several chat templates, a special token outside the tokenizer's added tokens,
truncation or padding set in tokenizer.json) gets None from `load_light_tokenizer`, and its caller reads it with
transformers instead.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from types import NoneType
from typing import Any, Sequence

import jinja2
import jinja2.nodes
import jinja2.utils
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
# Files transformers reads beside those, which this class does not: a folder holding one is left to transformers.
LEGACY_FILES = ("special_tokens_map.json", "added_tokens.json", "additional_chat_templates")
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
EXTRA_TOKENS = ("extra_special_tokens", "additional_special_tokens")  # transformers 5's name, then the old one
BPE_CLEAN_UP = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
# tokenizer_config.json keys honoured here, or which change nothing PreTrainedTokenizerFast does with a tokenizer.json
# (it ignores tokenizer_class, drops add_bos_token/add_eos_token for the file's post-processor, and keeps the rest
# only as attributes that encoding and decoding never read). Any other key sends the folder to transformers.
KNOWN_KEYS = frozenset(NAMED_TOKENS + EXTRA_TOKENS + (
    "chat_template", "clean_up_tokenization_spaces", BPE_CLEAN_UP, "split_special_tokens", "model_max_length",
    "backend", "tokenizer_class", "is_local", "local_files_only", "name_or_path", "add_prefix_space",
    "add_bos_token", "add_eos_token", "errors", "legacy", "padding_side", "truncation_side", "model_input_names",
    "processor_class"))
VERY_LARGE_INTEGER = int(1e30)  # transformers' model_max_length when none is given
MINIMUM_JINJA = (3, 1, 6)  # transformers refuses older jinja2 releases: they have known sandbox escapes


def load_light_tokenizer(folder: Path) -> LightTokenizer | None:
    """The tokenizer saved in `folder` (tokenizer.json, tokenizer_config.json, chat_template.jinja), or None when
    the folder holds something only transformers reads as transformers does (the module's note lists what).

    Raises what tokenizers and json raise for a damaged file, as transformers would: a damaged copy is the caller's
    to replace (gguf_meta converts the GGUF file again)."""
    folder = Path(folder)
    if not (folder / TOKENIZER_FILE).is_file() or not (folder / CONFIG_FILE).is_file():
        return None
    if any((folder / name).exists() for name in LEGACY_FILES) or not _jinja_is_safe():
        return None
    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    if not isinstance(config, dict) or not _config_is_plain(config):
        return None
    template = config.get("chat_template")
    if (folder / TEMPLATE_FILE).is_file():  # the file wins over the config's entry, as in transformers
        template = (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    backend = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    if backend.truncation is not None or backend.padding is not None:
        return None  # transformers takes settings from them (a pad token, a maximum length): not copied here
    tokenizer = LightTokenizer(folder, backend, config, template)
    added = {token.content for token in backend.get_added_tokens_decoder().values()}
    if not set(tokenizer.all_special_tokens) <= added:
        return None  # transformers would add the missing ones to the tokenizer, changing how text splits
    return tokenizer


def _config_is_plain(config: dict) -> bool:
    """Whether tokenizer_config.json says nothing beyond what LightTokenizer honours: known keys only, special
    tokens as plain strings, one chat template, special tokens not split."""
    if not set(config) <= KNOWN_KEYS or config.get("split_special_tokens"):
        return False
    if not all(config.get(name) is None or isinstance(config[name], str) for name in NAMED_TOKENS):
        return False
    extra, template = _extra_tokens(config), config.get("chat_template")
    return isinstance(extra, list) and all(isinstance(t, str) for t in extra) and isinstance(template, (str, NoneType))


def _extra_tokens(config: dict) -> Any:
    """The extra special tokens of a tokenizer_config.json: extra_special_tokens, else (transformers 4's name)
    additional_special_tokens, else none."""
    return config.get("extra_special_tokens") or config.get("additional_special_tokens") or []


def _jinja_is_safe() -> bool:
    """Whether the installed jinja2 is one transformers renders chat templates with (3.1.6 or later)."""
    parts = []
    for part in jinja2.__version__.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts) >= MINIMUM_JINJA


class LightTokenizer:
    """transformers' PreTrainedTokenizerFast as specchat uses it, over a tokenizers.Tokenizer.

    Encoding: `tokenizer(text or texts, add_special_tokens=True)["input_ids"]`, `encode`. Decoding: `decode`,
    `convert_ids_to_tokens`. Vocabulary: `get_vocab`, `get_added_vocab`, `added_tokens_decoder`, `len()`,
    `vocab_size`. Special tokens: `bos_token`/`eos_token`/... and their `_id`s, `all_special_tokens`,
    `all_special_ids`, `special_tokens_map`. Chats: `chat_template`, `apply_chat_template`. `backend_tokenizer`
    (what chat_prompt and the universal drafter encode with directly), `save_pretrained`, `name_or_path`."""

    is_fast = True

    def __init__(self, folder: Path, backend: Tokenizer, config: dict, chat_template: str | None):
        """`backend`: tokenizer.json read; `config`: tokenizer_config.json; `chat_template`: the folder's template
        (chat_template.jinja, else the config's), or None."""
        self.name_or_path = str(folder)
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self.split_special_tokens = False
        self.clean_up_tokenization_spaces = bool(config.get("clean_up_tokenization_spaces", False))
        self.model_max_length = config.get("model_max_length") or VERY_LARGE_INTEGER
        self._config = config
        self._named = {name: config[name] for name in NAMED_TOKENS if config.get(name) is not None}
        self._extra = list(_extra_tokens(config))
        backend.encode_special_tokens = False  # special tokens' text is read as the token (split_special_tokens)

    def __getattr__(self, name: str):
        """bos_token ... mask_token (the token's text, or None) and bos_token_id ... mask_token_id (its id, the
        unknown token's for a token the vocabulary lacks, or None), as transformers resolves them."""
        token = name.removesuffix("_id")
        if token not in NAMED_TOKENS:
            raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")
        text = self.__dict__.get("_named", {}).get(token)
        if text is None or token == name:
            return text
        return self.convert_tokens_to_ids(text)

    def __len__(self) -> int:
        """The vocabulary's size with the added tokens, as len() of a transformers tokenizer."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"LightTokenizer(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, " \
               f"special_tokens={self.special_tokens_map})"

    # --- vocabulary and special tokens -------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The base vocabulary's size, without the added tokens."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def get_vocab(self) -> dict[str, int]:
        """Every token's text to its id, added tokens included."""
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    @property
    def added_tokens_decoder(self) -> dict:
        """The added tokens by id, as tokenizers.AddedToken (str() their text, .special whether they are special)."""
        return self.backend_tokenizer.get_added_tokens_decoder()

    def get_added_vocab(self) -> dict[str, int]:
        """The added tokens' texts to their ids, in id order."""
        return {token.content: index for index, token in sorted(self.added_tokens_decoder.items())}

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """The named special tokens that are set (bos_token, eos_token, ...) to their texts; the variables a chat
        template sees besides the conversation."""
        return {name: self._named[name] for name in NAMED_TOKENS if name in self._named}

    @property
    def all_special_tokens(self) -> list[str]:
        """The named special tokens, then the extra ones, each once, in transformers' order."""
        return list(dict.fromkeys([*self.special_tokens_map.values(), *self._extra]))

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of all_special_tokens."""
        return self.convert_tokens_to_ids(self.all_special_tokens)

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]):
        """The id of a token's text (the unknown token's id, or None, when the vocabulary lacks it), or a list of
        them for a list of texts."""
        if isinstance(tokens, str):
            index = self.backend_tokenizer.token_to_id(tokens)
            unknown = self._named.get("unk_token")
            return index if index is not None or unknown is None else self.backend_tokenizer.token_to_id(unknown)
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int], skip_special_tokens: bool = False):
        """A token's text in the vocabulary ("Ġhello"), or the list of them for a list of ids (special ones left out
        with skip_special_tokens)."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        skipped = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skipped]

    # --- encoding and decoding ---------------------------------------------------------------------------------------

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = True) -> dict[str, list]:
        """{"input_ids": ..., "attention_mask": ...} of one text (lists of ints) or of a list of texts (a list of
        lists each). add_special_tokens: what the tokenizer's post-processor adds (BOS for some models)."""
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens=add_special_tokens)
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        encodings = self.backend_tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings]}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of `text`; special tokens' texts in it become those tokens."""
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None):
        """The text of `token_ids` (an int, a sequence of ints, or a sequence of such sequences: a list of texts),
        without the special tokens with skip_special_tokens. clean_up_tokenization_spaces (None: the config's) takes
        the spaces before punctuation out, except for BPE vocabularies, where transformers 5 declines to."""
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        token_ids = list(token_ids)
        if token_ids and isinstance(token_ids[0], (list, tuple)):
            return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in token_ids]
        text = self.backend_tokenizer.decode([int(i) for i in token_ids], skip_special_tokens=skip_special_tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        if clean_up_tokenization_spaces and (type(self.backend_tokenizer.model).__name__ != "BPE"
                                             or self._config.get(BPE_CLEAN_UP)):
            text = clean_up_tokenization(text)
        return text

    # --- chats --------------------------------------------------------------------------------------------------------

    def apply_chat_template(self, conversation: Sequence[dict], add_generation_prompt: bool = False,
                            tokenize: bool = True, chat_template: str | None = None, **kwargs):
        """The conversation (a list of {"role", "content", ...} messages) rendered by the chat template (or by
        `chat_template`): the text with tokenize=False, else {"input_ids", "attention_mask"} of that text (no special
        tokens added: the template writes them). kwargs are further template variables, over the special tokens.
        ValueError when there is no template or no message; jinja2's errors for a template that fails."""
        template = chat_template or self.chat_template
        if not template:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set and no "
                             "template argument was passed!")
        if len(conversation) == 0:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        messages = [_with_reasoning_aliases({k: v for k, v in dict(m).items() if v is not None})
                    for m in conversation]
        text = compiled_template(template).render(messages=messages, tools=None, documents=None,
                                                  add_generation_prompt=add_generation_prompt,
                                                  **{**self.special_tokens_map, **kwargs})
        return self(text, add_special_tokens=False) if tokenize else text

    # --- saving -------------------------------------------------------------------------------------------------------

    def save_pretrained(self, save_directory, **_) -> tuple[str, ...]:
        """Writes the tokenizer to `save_directory` as transformers would read it back (tokenizer.json,
        tokenizer_config.json, chat_template.jinja); returns the files' paths."""
        folder = Path(save_directory)
        folder.mkdir(parents=True, exist_ok=True)
        config = {key: value for key, value in self._config.items() if key != "chat_template"}
        paths = [folder / CONFIG_FILE, folder / TOKENIZER_FILE]
        paths[0].write_text(json.dumps(config, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        self.backend_tokenizer.save(str(paths[1]))
        if self.chat_template:
            paths.append(folder / TEMPLATE_FILE)
            paths[2].write_text(self.chat_template, encoding="utf-8")
        return tuple(str(path) for path in paths)


def clean_up_tokenization(text: str) -> str:
    """transformers' clean-up of decoded text: no space before punctuation and English contractions."""
    for spaced, joined in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                           (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(spaced, joined)
    return text


# --- the chat template's environment, as transformers.utils.chat_template_utils makes it ------------------------------

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the standard name first


def _with_reasoning_aliases(message: dict) -> dict:
    """A message with its reasoning (under any of REASONING_FIELDS) also under reasoning_content and thinking, the
    names templates read, as transformers passes it."""
    reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
    return message if reasoning is None else {"thinking": reasoning, **message, "reasoning_content": reasoning}


class GenerationBlocks(Extension):
    """`{% generation %}...{% endgeneration %}`, which templates that mark the assistant's tokens hold: rendered as
    its content (transformers tracks where those blocks fall only when asked for an assistant-token mask)."""

    tags = {"generation"}

    def parse(self, parser):
        """The block's body, as a call of _content (jinja's way for an extension to wrap a body)."""
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_content"), [], [], body).set_lineno(lineno)

    def _content(self, caller) -> str:
        """The rendered body, unchanged."""
        return caller()


class TemplateDict:
    """`dict(...)` in a template: a dict is made, but no attribute of the dict type is reachable through it."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """`namespace(...)` in a template, refusing underscore names (a way to CPython's internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 - jinja's own signature, so that namespace(self=...) still works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute.")


def _raise_exception(message):
    """`raise_exception(message)` in a template: the template refuses the conversation (a TemplateError)."""
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson filter: plain json.dumps (jinja's own escapes HTML characters), its options exposed."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    """`strftime_now(format)` in a template: the local time now, formatted (templates that write today's date)."""
    return datetime.now().strftime(format)


@lru_cache
def compiled_template(template: str) -> jinja2.Template:
    """`template` compiled in transformers' chat-template environment (once per template text)."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[GenerationBlocks, loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = TemplateDict()
    environment.globals["namespace"] = TemplateNamespace
    return environment.from_string(template)
