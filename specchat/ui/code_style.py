"""Code blocks in rendered replies: a tinted background, a monospace font and Pygments syntax colours."""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontDatabase, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

try:  # optional at run time: without Pygments code is still shown, just not coloured
    from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
    from pygments.token import Comment, Keyword, Name, Number, Operator, String
    from pygments.util import ClassNotFound
except ImportError:  # pragma: no cover
    get_lexer_by_name = None

LIGHT = {"Keyword": "#8a2be2", "Name.Function": "#1f6feb", "Name.Class": "#1f6feb", "String": "#2e7d32",
         "Number": "#b35900", "Comment": "#6b7280", "Operator": "#444444", "Name.Builtin": "#0b7285"}
DARK = {"Keyword": "#c792ea", "Name.Function": "#82aaff", "Name.Class": "#82aaff", "String": "#c3e88d",
        "Number": "#f78c6c", "Comment": "#8a8f98", "Operator": "#c0c0c0", "Name.Builtin": "#89ddff"}


def style_code_blocks(document: QTextDocument, start: int, end: int, background: QColor, dark: bool) -> None:
    """Every code block between document positions start and end gets the code look."""
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    block = document.findBlock(start)
    group: list = []
    while block.isValid() and block.position() < end:
        if _is_code(block):
            fmt = block.blockFormat()
            fmt.setBackground(background)
            fmt.setLeftMargin(6)
            cursor = QTextCursor(block)
            cursor.setBlockFormat(fmt)
            group.append(block)
        elif group:
            _colour(document, group, mono, dark)
            group = []
        block = block.next()
    if group:
        _colour(document, group, mono, dark)


def _is_code(block) -> bool:
    fmt = block.blockFormat()
    return fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.hasProperty(
        QTextFormat.Property.BlockCodeLanguage)


def _colour(document: QTextDocument, blocks: list, mono: QFont, dark: bool) -> None:
    """Lexes the block group's text as one snippet and colours the tokens (backgrounds, i.e. draft highlights,
    are left alone because only the font and foreground are merged)."""
    language = blocks[0].blockFormat().property(QTextFormat.Property.BlockCodeLanguage) or ""
    code = "\n".join(b.text() for b in blocks)
    positions = [b.position() + i for b in blocks for i in range(len(b.text()) + 1)]
    cursor = QTextCursor(document)
    base = QTextCharFormat()
    base.setFont(mono)
    for b in blocks:
        cursor.setPosition(b.position())
        cursor.setPosition(b.position() + len(b.text()), QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(base)
    if get_lexer_by_name is None:
        return
    palette = DARK if dark else LIGHT
    offset = 0
    for token, value in _lexer(language, code).get_tokens(code):
        colour = _token_colour(token, palette)
        if colour and value.strip():
            a, b = offset, min(offset + len(value), len(positions) - 1)
            if a < b:
                fmt = QTextCharFormat()
                fmt.setForeground(QColor(colour))
                cursor.setPosition(positions[a])
                cursor.setPosition(positions[b - 1] + 1, QTextCursor.MoveMode.KeepAnchor)
                cursor.mergeCharFormat(fmt)
        offset += len(value)


def _lexer(language: str, code: str):
    try:
        return get_lexer_by_name(language) if language else guess_lexer(code)
    except ClassNotFound:
        return TextLexer()


def _token_colour(token, palette: dict) -> str | None:
    for name, kind in (("Comment", Comment), ("String", String), ("Number", Number), ("Keyword", Keyword),
                       ("Name.Function", Name.Function), ("Name.Class", Name.Class),
                       ("Name.Builtin", Name.Builtin), ("Operator", Operator)):
        if token in kind:
            return palette[name]
    return None
