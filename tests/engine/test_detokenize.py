"""Incremental detokenisation: deltas add up to the full decode, characters are never split."""

from specchat.engine.decoding.detokenize import IncrementalDetokenizer


def stream(tokenizer, ids):
    detok = IncrementalDetokenizer(tokenizer)
    deltas, spans = [], []
    for token in ids:
        delta, span = detok.push(token)
        deltas.append(delta)
        spans.append(span)
    return detok, deltas, spans


def test_multibyte_characters_arrive_whole(tokenizer):
    text = "Café naïve 🦊🚀 résumé — ok"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text) / 2  # several tokens per character in places: a real test of byte handling
    detok, deltas, spans = stream(tokenizer, ids)
    assert "".join(deltas) == text == detok.text
    assert all("\ufffd" not in d for d in deltas)
    assert any(start == end for start, end in spans)  # a token that ended mid-character got an empty span
    assert "".join(text[a:b] for a, b in spans) == text


def test_special_tokens_are_skipped(tokenizer):
    ids = tokenizer("hello<|im_end|>", add_special_tokens=False)["input_ids"]
    detok, deltas, _ = stream(tokenizer, ids)
    assert detok.text == "hello"


def test_flush_releases_an_unfinished_character(tokenizer):
    ids = tokenizer("🦊", add_special_tokens=False)["input_ids"]
    detok, deltas, _ = stream(tokenizer, ids[:-1])
    assert detok.text == ""
    assert detok.flush() == tokenizer.decode(ids[:-1])
