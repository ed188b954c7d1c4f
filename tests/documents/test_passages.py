"""Cutting a document's text into passages: they cover the text in order, are about the target size, prefer
paragraph breaks to sentence ends to whitespace, and each names the page it starts on."""

from hypothesis import given, settings
from hypothesis import strategies as st

from specchat.documents.passages import split_passages


def assert_cover(text, passages):
    assert "".join(passage.text for passage in passages) == text
    for position, passage in enumerate(passages):
        assert passage.position == position and text[passage.start:passage.end] == passage.text
        assert passage.end > passage.start
    for before, after in zip(passages, passages[1:]):
        assert before.end == after.start


@settings(max_examples=300, derandomize=True, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab .\n\t!?。"), max_size=3000),
       target=st.integers(min_value=1, max_value=400))
def test_passages_cover_any_text_in_order(text, target):
    passages = split_passages(text, target_chars=target)
    if not text.strip():
        assert passages == ()
        return
    assert_cover(text, passages)
    for passage in passages[:-1]:
        assert len(passage.text) <= target + target // 2


def test_cuts_fall_at_paragraph_breaks_first():
    paragraphs = [f"Paragraph {number}. " + "Words in a sentence. " * 20 for number in range(10)]
    text = "\n\n".join(paragraphs)
    passages = split_passages(text, target_chars=500)
    assert_cover(text, passages)
    for passage in passages[:-1]:
        assert passage.text.endswith("\n\n")
        assert 250 <= len(passage.text) <= 750


def test_without_paragraphs_cuts_fall_at_sentence_ends_then_whitespace_then_anywhere():
    sentences = "This is one sentence that ends here. " * 100
    for passage in split_passages(sentences, target_chars=300)[:-1]:
        assert passage.text.endswith(". ")
    words = "word " * 1000
    for passage in split_passages(words, target_chars=300)[:-1]:
        assert passage.text.endswith(" ") and not passage.text.startswith(" ")
    letters = "x" * 1000
    assert [len(passage.text) for passage in split_passages(letters, target_chars=300)] == [300, 300, 400]


def test_each_passage_names_the_page_its_first_visible_character_is_on():
    pages = ["Alpha text. " * 50, "Beta text. " * 50, "Gamma text. " * 50]
    text = "\n\n".join(pages)
    page_starts = [0, len(pages[0]) + 2, len(pages[0]) + len(pages[1]) + 4]
    passages = split_passages(text, page_starts, target_chars=400)
    assert_cover(text, passages)
    names = {1: "Alpha", 2: "Beta", 3: "Gamma"}
    for passage in passages:
        assert passage.text.strip().startswith(names[passage.page])
    assert split_passages("no pages here")[0].page is None


def test_trailing_whitespace_stays_with_the_last_passage():
    text = "A sentence. " * 200 + "\n\n   \n"
    passages = split_passages(text, target_chars=300)
    assert_cover(text, passages)
    assert passages[-1].text.strip()
