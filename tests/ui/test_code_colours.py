"""Code blocks in replies: every token's colour covers the whole token in the Qt document, no more, no less
(issue 37: a code block that starts with an empty line had the last character of each token left uncoloured,
"de|f"; an emoji shifted every colour after it; a reply that starts with code lost its first line's code look)."""

import re

import pytest
from PySide6.QtGui import QColor, QTextFormat

from specchat.chats.reply_spans import ReplySpans
from specchat.ui.code_style import DARK, LIGHT, character_positions
from specchat.ui.theme import current_theme
from specchat.ui.transcript import MessageView, Transcript

CODE = ('def parse_scores(text: str) -> list:\n'
        '    """Return the scores in text, or None."""\n'
        '    if not text:\n'
        '        return None\n'
        '    return [int(x) for x in text.split()]  # 🙂 scores\n')
REPLIES = {
    "after a paragraph": f"Here is the function:\n\n```python\n{CODE}```\n\nDone.",
    "starting with an empty line": f"Here is the function:\n\n```python\n\n{CODE}```\n",  # Qwen's replies did
    "at the start of the reply": f"```python\n{CODE}```\n",
    "with no language named": f"Here:\n\n```\n{CODE}```\n",
    "after an emoji": f"Here 🙂🙂:\n\n```python\n{CODE}```\n",
}
KEYWORDS = ("def", "if", "return", "None", "for")  # Pygments' Keyword tokens in CODE ("not", "in" are operators)


def characters(document) -> tuple[str, list[int]]:
    """The document's text, block by block (a newline between blocks), and each character's document position."""
    text, positions = [], []
    block = document.begin()
    while block.isValid():
        text.append(block.text() + "\n")
        positions.extend(character_positions(block) + [block.position() + block.length() - 1])
        block = block.next()
    return "".join(text), positions


def foreground_at(document, position: int) -> str | None:
    """The foreground colour (#rrggbb) the document gives the character at `position`, or None (the default)."""
    block = document.findBlock(position)
    iterator = block.begin()
    while not iterator.atEnd():
        fragment = iterator.fragment()
        if fragment.position() <= position < fragment.position() + fragment.length():
            fmt = fragment.charFormat()
            return fmt.foreground().color().name() if fmt.hasProperty(QTextFormat.Property.ForegroundBrush) else None
        iterator += 1
    return None


def render(qtbot, reply: str, highlight: bool = True) -> Transcript:
    transcript = Transcript()
    qtbot.addWidget(transcript)
    start = reply.index("def parse_scores")
    spans = ReplySpans(spans=[(start, start + len(CODE), "draft")])  # drafted code: backgrounds merged in too
    transcript.set_highlighting(highlight, False)
    transcript.set_messages([MessageView(1, "assistant", reply, spans)])
    return transcript


@pytest.mark.parametrize("where", sorted(REPLIES))
def test_every_keyword_token_is_coloured_over_its_whole_extent(qtbot, where):
    transcript = render(qtbot, REPLIES[where])
    document = transcript.document()
    keyword = (DARK if current_theme().dark else LIGHT)["Keyword"]
    text, positions = characters(document)
    start = text.index("def parse_scores")
    code = text[start:start + len(CODE)]
    assert code == CODE  # every line of the code is in the document, the first one included
    found = []
    for match in re.finditer(r"\b(" + "|".join(KEYWORDS) + r")\b", code):
        if match.group() == "None" and code[:match.start()].count('"""') % 2:
            continue  # "None" inside the docstring is part of a string
        first, last = start + match.start(), start + match.end() - 1
        colours = [foreground_at(document, positions[i]) for i in range(first, last + 1)]
        assert colours == [keyword] * len(colours), (match.group(), colours)
        assert foreground_at(document, positions[last + 1]) != keyword, f"{match.group()!r}'s colour runs on"
        assert foreground_at(document, positions[first - 1]) != keyword, f"{match.group()!r} coloured from before"
        found.append(match.group())
    assert found == ["def", "if", "return", "None", "return", "for"]
    assert transcript.draft_positions()  # the draft background is merged with the colours, not replaced


def test_names_strings_and_comments_are_whole_too(qtbot):
    transcript = render(qtbot, REPLIES["starting with an empty line"], highlight=False)
    document = transcript.document()
    palette = DARK if current_theme().dark else LIGHT
    text, positions = characters(document)
    for word, kind in (("parse_scores", "Name.Function"), ("str", "Name.Builtin"), ("int", "Name.Builtin"),
                       ('"""Return the scores in text, or None."""', "String"), ("# 🙂 scores", "Comment")):
        first = text.index(word, text.index("def parse_scores"))
        colours = {foreground_at(document, positions[i]) for i in range(first, first + len(word))}
        assert colours == {QColor(palette[kind]).name()}, (word, colours)
        assert foreground_at(document, positions[first + len(word)]) != QColor(palette[kind]).name()


def test_a_reply_that_starts_with_code_keeps_its_first_line_in_the_block(qtbot):
    transcript = render(qtbot, REPLIES["at the start of the reply"])
    document = transcript.document()
    block = document.begin()
    while not block.text().startswith("def parse_scores"):
        block = block.next()
    fmt = block.blockFormat()
    assert fmt.property(QTextFormat.Property.BlockCodeLanguage) == "python"
    assert fmt.background().color() == current_theme().code_background  # the code look, like the lines after it


def test_draft_highlights_after_an_emoji_and_at_the_reply_end_cover_their_text(qtbot):
    """The same UTF-16 positions for the draft backgrounds: a run after an emoji is not shifted, and one that ends
    the reply is not dropped (its end was past the document's end)."""
    reply = "Smile 🙂🙂 then the end"
    transcript = Transcript()
    qtbot.addWidget(transcript)
    start = reply.index("then")
    transcript.set_messages([MessageView(1, "assistant", reply, ReplySpans(spans=[(start, len(reply), "draft")]))])
    text, positions = characters(transcript.document())
    at = {position: char for position, char in zip(positions, text)}
    assert "".join(at[p] for p in transcript.draft_positions() if p in at) == "then the end"
