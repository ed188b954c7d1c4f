"""The head's broad data: the vendored documents, the turn prefix the target writes requests from, the sampler."""

import pytest

from specchat.training.broad import sample_turns, turn_prefix, usable_request
from specchat.training.documents import (FRENCH, FRENCH_WORDS, PASSAGE_WORDS, PEPS, french_paragraphs, load_documents,
                                         pep_passages, plain)
from specchat.training.manifest import BenchmarkIndex, find_overlaps, spec_bench_texts

PEP = """PEP: 9999
Title: A Made-Up Proposal
Author: Nobody <nobody@example.org>
Status: Draft

Abstract
========

This PEP proposes a :pep:`8`-style rule for ``spam`` and `eggs <https://example.org>`_ in every module of the
standard library, so that readers find the same shape of code wherever they look, and reviewers spend their
time on what the code does instead of on how it is laid out on the page. It asks nothing of code outside the
standard library, and it changes no behaviour: only the layout of the files moves.

For example::

    spam = eggs()  # a code block is never part of a passage

Rationale
=========

The second section is long enough to be a passage of its own once it is joined with the paragraph that follows it,
because a passage is a run of whole paragraphs of one section and never crosses into the next one.

Its second paragraph adds more words about the proposal: what it changes, who it helps, and why the old habit
of laying out each module differently made the standard library harder to read for newcomers and experts alike.

Copyright
=========

This document is placed in the public domain or under the
CC0-1.0-Universal license, whichever is more permissive.
"""


def test_plain_text_drops_restructured_text_markup():
    assert plain(":pep:`484` adds ``typing`` (see `mypy <https://mypy.org>`_ and :func:`len`)::") == (
        "PEP 484 adds typing (see mypy and len):")
    assert plain("*emphasis* and **strong** stay words") == "emphasis and strong stay words"


def test_pep_passages_are_whole_prose_paragraphs_of_one_section():
    import random

    passages = pep_passages("9999", PEP, random.Random(0))
    texts = sorted(p["text"] for p in passages)
    assert len(passages) == 2 and all(p["source"] == "PEP 9999: A Made-Up Proposal" for p in passages)
    assert texts[0].startswith("The second section") and "\n\nIts second paragraph" in texts[0]
    assert texts[1].startswith("This PEP proposes a PEP 8-style rule for spam and eggs in every module")
    assert not any("spam = eggs()" in t or "Copyright" in t for t in texts)
    assert pep_passages("9999", PEP.replace("public domain", "Open Publication License").replace("CC0", "OPL"),
                        random.Random(0)) == []


def test_french_paragraphs_come_from_po_strings_without_code():
    po = ('msgid "Hello"\nmsgstr ""\n"Python est un langage de programmation puissant et facile à apprendre. Il '
          'dispose de structures "\n"de données de haut niveau et permet une approche simple mais efficace."\n\n'
          'msgid "x"\nmsgstr "Trop court."\n\nmsgid "y"\nmsgstr "Utilisez ``print()`` et ``len()`` pour afficher '
          'la longueur de la liste que vous venez de construire dans la boucle."\n')
    found = french_paragraphs("tutorial/appetite.po", po)
    assert [p["text"] for p in found] == ["Python est un langage de programmation puissant et facile à apprendre. "
                                          "Il dispose de structures de données de haut niveau et permet une "
                                          "approche simple mais efficace."]


def test_the_vendored_documents_fit_their_bounds_and_stay_apart_from_spec_bench():
    peps, french = load_documents(PEPS), load_documents(FRENCH)
    assert len(peps) > 1500 and len(french) > 1000
    assert all(PASSAGE_WORDS[0] <= len(p["text"].split()) <= PASSAGE_WORDS[1] for p in peps)
    assert all(FRENCH_WORDS[0] <= len(p["text"].split()) <= FRENCH_WORDS[1] for p in french)
    assert len({p["id"] for p in peps + french}) == len(peps) + len(french)
    texts = [(p["id"], p["text"]) for p in peps + french]
    assert find_overlaps(texts, BenchmarkIndex(spec_bench_texts())) == []


@pytest.fixture(scope="module")
def chat_tokenizer(tokenizer):
    import copy

    chat = copy.deepcopy(tokenizer)
    if not getattr(chat, "chat_template", None):
        chat.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return chat


def test_the_turn_prefix_is_the_conversation_up_to_the_next_user_text(chat_tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}]
    whole = chat_tokenizer.apply_chat_template(messages + [{"role": "user", "content": "What is 2+2?"}],
                                               tokenize=False)
    prefix = chat_tokenizer.decode(turn_prefix(chat_tokenizer, messages))
    assert whole.startswith(prefix) and whole[len(prefix):].startswith("What is 2+2?")


def test_only_requests_that_ended_on_their_own_and_read_as_one_turn_are_asked():
    assert usable_request("Can you help me plan a week of vegetarian dinners?")
    assert not usable_request(None)  # cut off: no end of turn within the budget
    assert not usable_request("Hi there")  # too short to be a request
    assert not usable_request("Write a poem.\nAssistant: Roses are red")  # runs on into a made-up reply
    assert not usable_request("word " * 200)


def test_sampled_turns_are_seeded_and_cut_at_the_end_of_turn(target, tokenizer):
    prefixes = [tokenizer("User asks:", add_special_tokens=False)["input_ids"]] * 6
    ends = set(range(160, len(tokenizer)))  # half the vocabulary ends a turn: most turns end within the budget
    first = sample_turns(target, tokenizer, prefixes, ends, 0, 16, 4, seed=3)
    assert first == sample_turns(target, tokenizer, prefixes, ends, 0, 16, 4, seed=3)
    assert first != sample_turns(target, tokenizer, prefixes, ends, 0, 16, 4, seed=4)
    assert sum(turn is not None for turn in first) >= 4
    never = sample_turns(target, tokenizer, prefixes, {len(tokenizer) + 1}, 0, 16, 4, seed=3)
    assert never == [None] * 6  # no end of turn within 16 tokens: cut off, not asked
