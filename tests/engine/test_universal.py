"""The universal drafter: a draft model with another tokenizer drafts for the target through text.

Two tokenizers whose token boundaries differ: the tests' byte-level BPE (GPT-2 / SmolLM2 style) and a
SentencePiece-style BPE ("▁" for spaces, byte fallback; Llama 2 / Mistral / Gemma style) trained on other sentences.
Greedy output must be the target's token for token, sampling must keep the target's distribution (checked with a
chi-square test that a wrong rule fails), and a draft that knows the text must get its drafts accepted.
"""

import json

import pytest
import torch
from tiny_models import EXACT_PLACEMENT, build_byte_tokenizer, build_tiny_llama
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import specchat.engine.decoding.speculative as speculative
from specchat.engine.decoding.sampling import SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import LookupHybrid, ModelDrafter, PromptLookupDrafter, UniversalDrafter, make_drafter
from specchat.engine.drafting.retokenize import DraftView, PrefixIndex, TextCodec
from specchat.engine.loading.compat import check_pair, shares_token_ids

OTHER_CORPUS = [
    "Drafting across tokenizers goes through text, then back to tokens.",
    "The lazy dog sleeps while a quick fox runs away over the hills.",
    "Ünïcödé wörds, naïve cafés and emoji 🦊🚀 take several bytes.",
    "Counting: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and back again.",
    "    indented code = [x * 2 for x in range(10)]\n",
] * 20

PROMPTS = [
    "The quick brown fox",
    "Café, naïve 🦊 résumé",  # several bytes per character, cut between byte-level tokens
    "  two leading spaces and a trailing one ",
    "def add(a, b):\n    return",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",  # special tokens as text
]

PASSAGE = ("Café au lait for the naïve fox 🦊: the quick brown fox jumps over the lazy dog, "
           "and then it counts 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 before it sleeps.")


def build_sentencepiece_tokenizer(vocab_size: int = 260) -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE: spaces as "▁" with one prepended to the text, byte fallback for characters it
    never saw, a decoder that drops the first space; trained on OTHER_CORPUS, so its boundaries differ."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>"]
    trained.train_from_iterator(OTHER_CORPUS, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                                  show_progress=False))
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    tokenizer.add_special_tokens(specials)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and where other processes share the CPU its waits for the
    other core can make these thousands of small passes ten times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def byte_level():
    return build_byte_tokenizer()


@pytest.fixture(scope="module")
def sentencepiece():
    return build_sentencepiece_tokenizer()


@pytest.fixture(scope="module")
def tokenizer_pairs(byte_level, sentencepiece):
    """(target's, draft's) both ways round."""
    return {"bytes->sentencepiece": (byte_level, sentencepiece), "sentencepiece->bytes": (sentencepiece, byte_level)}


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def greedy(engine, prompt, n=32):
    return engine.generate(prompt, GenerationConfig(max_new_tokens=n, k=3, adaptive_k=False, seed=0))


# --- the text bridge ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["bytes->sentencepiece", "sentencepiece->bytes"])
def test_the_draft_view_follows_the_text_token_by_token(tokenizer_pairs, direction):
    """Grown one target token at a time, the view's text is the decoded context up to its last whole character,
    and its draft ids are the draft tokenizer's own tokenization of that text: re-tokenizing only a window at the
    end mends a word split at the old end."""
    target_tokenizer, draft_tokenizer = tokenizer_pairs[direction]
    target, draft = TextCodec(target_tokenizer), TextCodec(draft_tokenizer)
    for text in [*PROMPTS, PASSAGE]:
        ids = ids_of(target_tokenizer, text)
        view = DraftView(target, draft)
        for n in range(1, len(ids) + 1):
            view.sync(ids[:n])
            assert view.text == target.decode(ids[: view.text_end])
            assert len(view.pending) < 4
            assert view.draft_ids == draft.encode(view.text), (text, n)
        assert view.text == target.decode(ids) and view.pending == []  # (a SentencePiece decoder drops the first space)


def test_a_long_prompt_is_decoded_in_one_piece_and_then_followed(byte_level, sentencepiece):
    ids = ids_of(byte_level, PASSAGE * 6)
    view = DraftView(TextCodec(byte_level), TextCodec(sentencepiece))
    view.sync(ids[:-20])
    for n in range(len(ids) - 19, len(ids) + 1, 3):
        view.sync(ids[:n])
        assert view.draft_ids == ids_of(sentencepiece, view.text)
    view.sync(ids[:5])  # not a continuation: starts again
    assert view.text == byte_level.decode(ids[: view.text_end])


def test_continuation_keeps_sentencepiece_spaces(sentencepiece):
    codec = TextCodec(sentencepiece)
    assert codec.decode(codec.continuation_ids("The lazy", " dog sleeps")) == "dog sleeps"  # "▁dog": one space
    assert codec.continuation_text(ids_of(sentencepiece, "The lazy"), ids_of(sentencepiece, "The lazy dog")[-1:]) \
        == " dog"


def test_the_prefix_index_finds_the_tokens_a_spelling_can_go_on_with(byte_level, sentencepiece):
    for tokenizer in (byte_level, sentencepiece):
        index = PrefixIndex(tokenizer)
        vocab = tokenizer.get_vocab()
        words = [w for w in vocab if w not in tokenizer.get_added_vocab()]
        for word in words:
            expected = sorted(vocab[w] for w in words if w.startswith(word) or (word.startswith(w) and w != word))
            assert sorted(index.compatible(word).tolist()) == expected, word
            assert index.extendable(vocab[word]) == any(w != word and w.startswith(word) for w in words)
        assert index.spelling(vocab["</s>" if tokenizer is sentencepiece else "<|im_end|>"]) is None


# --- greedy: the target's own output ------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["bytes->sentencepiece", "sentencepiece->bytes"])
def test_greedy_output_is_the_targets_token_for_token(tokenizer_pairs, direction):
    target_tokenizer, draft_tokenizer = tokenizer_pairs[direction]
    target = build_tiny_llama(len(target_tokenizer), seed=0)
    draft = build_tiny_llama(len(draft_tokenizer), seed=5, hidden=32, layers=1)
    plain = SpeculativeEngine(target, target_tokenizer, eos_token_ids=[])
    drafters = {"universal": UniversalDrafter(draft, target_tokenizer, draft_tokenizer),
                "hybrid": LookupHybrid(PromptLookupDrafter(),
                                       UniversalDrafter(draft, target_tokenizer, draft_tokenizer)),
                "transformers' forward": UniversalDrafter(draft, target_tokenizer, draft_tokenizer, lean=False),
                # proposing from every other draft token only, as a draft folder's proposal vocabulary does
                "proposal vocabulary": UniversalDrafter(draft, target_tokenizer, draft_tokenizer,
                                                        vocab_ids=torch.arange(0, len(draft_tokenizer), 2))}
    for prompt_text in PROMPTS:
        prompt = ids_of(target_tokenizer, prompt_text)
        expected = greedy(plain, prompt).token_ids
        for name, drafter in drafters.items():
            result = greedy(SpeculativeEngine(target, target_tokenizer, drafter, eos_token_ids=[]), prompt)
            assert result.token_ids == expected, (name, prompt_text)
            assert result.stats.draft_forwards > 0


def memorizing_llama(tokenizer, text: str, seed: int, steps: int = 200) -> torch.nn.Module:
    """A tiny Llama trained on one passage until it recites it: two of them with different tokenizers agree on
    the text, whatever their tokens."""
    ids = torch.tensor([ids_of(tokenizer, text)])
    model = build_tiny_llama(len(tokenizer), seed=seed, init=0.02)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.set_flush_denormal(True)  # Adam's tiny late updates are denormal floats, many times slower on a CPU
    try:
        for _ in range(steps):
            optimizer.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
    finally:
        torch.set_flush_denormal(False)
    return model.eval()


@pytest.fixture(scope="module")
def reciting_pair(byte_level, sentencepiece):
    return memorizing_llama(byte_level, PASSAGE, seed=1), memorizing_llama(sentencepiece, PASSAGE, seed=2)


def test_a_draft_that_knows_the_text_gets_its_drafts_accepted(reciting_pair, byte_level, sentencepiece):
    target, draft = reciting_pair
    for start in ("Café au", "the quick brown fox jumps", "counts 1, 2, 3"):
        prompt = ids_of(byte_level, PASSAGE[: PASSAGE.index(start) + len(start)])
        plain = greedy(SpeculativeEngine(target, byte_level, eos_token_ids=[]), prompt, n=24)
        assert plain.text and PASSAGE.find(plain.text[:8]) > 0  # the target recites the passage
        engine = SpeculativeEngine(target, byte_level, UniversalDrafter(draft, byte_level, sentencepiece),
                                   eos_token_ids=[])
        result = greedy(engine, prompt, n=24)
        assert result.token_ids == plain.token_ids
        assert result.stats.draft_accepted >= result.stats.new_tokens // 2, result.stats
        assert result.stats.target_passes < plain.stats.target_passes


# --- sampling: exact with a point-mass proposal ------------------------------------------------------------------

LETTERS = "abcdef"


def six_letter_tokenizer():
    """The target's: one token per letter, words split on spaces (as in test_sampling)."""
    tokenizer = Tokenizer(models.WordLevel({c: i for i, c in enumerate(LETTERS)}, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="a")


def spaced_letter_tokenizer():
    """The draft's: characters, with " x" merged into one token, in another id order: its boundaries sit before
    the spaces, the target's after them."""
    pieces = ["e", " ", " c", "a", " a", "f", " e", "b", " b", "d", " d", "c", " f"]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    merges = [(" ", c) for c in LETTERS]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


@pytest.fixture(scope="module")
def letters_world():
    target_tokenizer, draft_tokenizer = six_letter_tokenizer(), spaced_letter_tokenizer()
    target = build_tiny_llama(len(LETTERS), seed=11, hidden=16, layers=1, init=0.6)
    draft = build_tiny_llama(len(draft_tokenizer), seed=4, hidden=16, layers=1, init=0.6)
    draft.generation_config.eos_token_id = None  # no end-of-text token among the letters
    return target, draft, target_tokenizer, draft_tokenizer


def exact_joint(target, prompt, length):
    """P(first `length` generated tokens) under target-only sampling at temperature 1, by enumeration."""
    import itertools

    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(len(LETTERS)), repeat=length):
            logits = target(torch.tensor([prompt + list(seq)])).logits[0, len(prompt) - 1 : len(prompt) - 1 + length]
            steps = torch.softmax(logits.double(), dim=-1)
            probs[seq] = float(torch.prod(steps[torch.arange(length), torch.tensor(seq)]))
    return probs


def sample_joint(engine, prompt, runs, length):
    counts, accepted = {}, 0
    for seed in range(runs):
        result = engine.generate(prompt, GenerationConfig(max_new_tokens=length + 1, k=2, adaptive_k=False, seed=seed,
                                                          sampling=SamplingParams(temperature=1.0)))
        key = tuple(result.token_ids[:length])
        counts[key] = counts.get(key, 0) + 1
        accepted += result.stats.draft_accepted
    return counts, accepted


def accept_every_proposal(target_probs, draft, draft_probs, sampler):
    """A wrong rule: take the draft as it is (right for greedy only), then sample the bonus token."""
    return len(draft), int(sampler.sample(target_probs[len(draft)]))


def resample_from_p(target_probs, draft, draft_probs, sampler):
    """A subtler wrong rule: on rejection draw from p itself instead of p with the proposal removed."""
    from specchat.engine.decoding.sampling import verify_stochastic

    n, token = verify_stochastic(target_probs, draft, draft_probs, sampler)
    if n < len(draft):
        token = int(sampler.sample(target_probs[n]))
    return n, token


def test_sampling_through_text_keeps_the_targets_distribution(letters_world, monkeypatch):
    from test_sampling import chi_square_p

    target, draft, target_tokenizer, draft_tokenizer = letters_world
    prompt = [0, 1, 2, 0, 1]  # "a b c a b": the draft reads " b" where the target reads "b"
    length, runs = 3, 1000
    expected = exact_joint(target, prompt, length)
    engine = SpeculativeEngine(target, target_tokenizer, UniversalDrafter(draft, target_tokenizer, draft_tokenizer),
                               eos_token_ids=[])

    counts, accepted = sample_joint(engine, prompt, runs, length)
    assert accepted > runs // 4, accepted  # the drafts really were used
    assert chi_square_p(counts, expected, runs) > 1e-3

    for wrong_rule, wrong_runs in ((accept_every_proposal, 300), (resample_from_p, runs)):  # the first is far off
        monkeypatch.setattr(speculative, "verify_stochastic", wrong_rule)
        wrong, _ = sample_joint(engine, prompt, wrong_runs, length)
        assert chi_square_p(wrong, expected, wrong_runs) < 1e-6, wrong_rule.__name__


# --- the registry, the pair, the compatibility report -------------------------------------------------------------

def test_a_different_tokenizer_is_compatible_through_text(byte_level, sentencepiece):
    report = check_pair(byte_level, sentencepiece)
    assert report.compatible and report.through_text
    assert report.summary().startswith("compatible through text (universal drafting): the tokenizers differ")
    assert "vocabulary sizes differ" in report.summary()
    same = check_pair(byte_level, build_byte_tokenizer())
    assert same.compatible and not same.through_text and same.summary() == "compatible"
    assert shares_token_ids(byte_level, build_byte_tokenizer()) and not shares_token_ids(byte_level, sentencepiece)


def test_the_model_kinds_draft_through_text_when_the_tokenizers_differ(byte_level, sentencepiece):
    draft = build_tiny_llama(len(sentencepiece), seed=5, hidden=32, layers=1)
    assert isinstance(make_drafter("model", draft, tokenizers=(byte_level, sentencepiece)), UniversalDrafter)
    hybrid = make_drafter("hybrid", draft, tokenizers=(byte_level, sentencepiece))
    assert isinstance(hybrid, LookupHybrid) and isinstance(hybrid.model_drafter, UniversalDrafter)
    assert isinstance(make_drafter("model", draft, tokenizers=(byte_level, build_byte_tokenizer())), ModelDrafter)
    assert isinstance(make_drafter("universal", draft, tokenizers=(byte_level, sentencepiece)), UniversalDrafter)
    with pytest.raises(ValueError, match="tokenizers"):
        make_drafter("universal", draft)


def test_a_pair_of_two_tokenizers_loads_and_decodes_losslessly(tmp_path, byte_level, sentencepiece):
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import check_sources, load_pair
    from specchat.models.sources import ModelSource

    for name, tokenizer, model in (("target", byte_level, build_tiny_llama(len(byte_level), seed=0)),
                                   ("draft", sentencepiece, build_tiny_llama(len(sentencepiece), seed=5))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    target, draft = ModelSource.parse(str(tmp_path / "target")), ModelSource.parse(str(tmp_path / "draft"))
    assert check_sources(target, draft).through_text
    pair = load_pair(target, draft, LoadOptions(device="cpu"))
    prompt = ids_of(byte_level, PROMPTS[1])
    expected = greedy(pair.engine("none"), prompt).token_ids
    for kind in ("model", "hybrid", "universal"):
        engine = pair.engine(kind)
        assert isinstance(getattr(engine.drafter, "model_drafter", engine.drafter), UniversalDrafter)
        assert greedy(engine, prompt).token_ids == expected, kind


# --- the real embedded SmolLM2 drafting for a model of another tokenizer ------------------------------------------

COUNTING = ", ".join(str(i) for i in range(1, 41)) + "."


@pytest.mark.model
def test_smollm2_drafts_for_a_target_with_another_tokenizer(tmp_path, byte_level):
    """The embedded SmolLM2-135M (49152 tokens) as the draft of a tiny target with the tests' byte-level
    tokenizer (320 tokens) that was trained to count: SmolLM2 counts too, so its drafts are accepted, and the
    output is the target's own."""
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource

    target = memorizing_llama(byte_level, COUNTING, seed=3)
    target.save_pretrained(tmp_path)
    byte_level.save_pretrained(tmp_path)
    pair = load_pair(ModelSource.parse(str(tmp_path)), ModelSource.parse("embedded"),
                     LoadOptions(backend="torch", **EXACT_PLACEMENT))
    prompt = ids_of(byte_level, COUNTING[: COUNTING.index("12,") + 3])
    plain = greedy(pair.engine("none"), prompt, n=40)
    assert plain.text.startswith(" 13, 14")  # the target counts on
    engine = pair.engine("model")
    assert isinstance(engine.drafter, UniversalDrafter)
    result = greedy(engine, prompt, n=40)
    assert result.token_ids == plain.token_ids
    assert result.stats.draft_accepted > result.stats.new_tokens // 3, result.stats
