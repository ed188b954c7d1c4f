"""Code blocks in rendered replies: a tinted background, a monospace font and Pygments syntax colours."""

from __future__ import annotations

import ast

from PySide6.QtGui import QColor, QFont, QFontDatabase, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

try:  # optional at run time: without Pygments code is still shown, just not coloured
    from pygments.lexers import PythonLexer, TextLexer, get_lexer_by_name, guess_lexer
    from pygments.token import Comment, Keyword, Name, Number, Operator, String
    from pygments.util import ClassNotFound
except ImportError:  # pragma: no cover
    get_lexer_by_name = None

LIGHT = {"Keyword": "#8a2be2", "Name.Function": "#1f6feb", "Name.Class": "#1f6feb", "String": "#2e7d32",
         "Number": "#b35900", "Comment": "#6b7280", "Operator": "#444444", "Name.Builtin": "#0b7285"}
DARK = {"Keyword": "#c792ea", "Name.Function": "#82aaff", "Name.Class": "#82aaff", "String": "#c3e88d",
        "Number": "#f78c6c", "Comment": "#8a8f98", "Operator": "#c0c0c0", "Name.Builtin": "#89ddff"}
SURE_GUESS = 0.1  # Pygments' confidence (0-1) in the language it guesses for a code block that names none


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


def character_positions(block) -> list[int]:
    """The document position of each character of block.text(), as Python counts them. Qt counts UTF-16 units: a
    character outside the Basic Multilingual Plane (an emoji) takes two positions, so i is not position + i after
    one."""
    positions, position = [], block.position()
    for char in block.text():
        positions.append(position)
        position += 2 if ord(char) > 0xFFFF else 1
    return positions


def _colour(document: QTextDocument, blocks: list, mono: QFont, dark: bool) -> None:
    """Lexes the block group's text as one snippet and colours the tokens (backgrounds, i.e. draft highlights,
    are left alone because only the font and foreground are merged). Token i of the lexer's output covers the
    same characters of `code` as of the document: the lexer keeps the text as it is (no newline stripped or
    added), and positions map characters to the document's UTF-16 positions."""
    language = blocks[0].blockFormat().property(QTextFormat.Property.BlockCodeLanguage) or ""
    code = "\n".join(b.text() for b in blocks)
    positions = []
    for b in blocks:  # each line's characters, then its end (where the "\n" joining the lines is)
        positions.extend(character_positions(b))
        positions.append(b.position() + b.length() - 1)
    cursor = QTextCursor(document)
    base = QTextCharFormat()
    base.setFont(mono)
    for b in blocks:
        cursor.setPosition(b.position())
        cursor.setPosition(b.position() + b.length() - 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(base)
    if get_lexer_by_name is None:
        return
    tokens = list(_lexer(language, code).get_tokens(code))  # the text as it is: see _lexer
    if "".join(value for _, value in tokens) != code:
        return  # a lexer that rewrote the text: no colours rather than colours in the wrong places
    palette = DARK if dark else LIGHT
    offset = 0
    for token, value in tokens:
        colour = _token_colour(token, palette)
        if colour and value.strip():
            a, b = offset, min(offset + len(value), len(positions) - 1)
            if a < b:
                fmt = QTextCharFormat()
                fmt.setForeground(QColor(colour))
                cursor.setPosition(positions[a])
                cursor.setPosition(positions[b], QTextCursor.MoveMode.KeepAnchor)  # where the next character is
                cursor.mergeCharFormat(fmt)
        offset += len(value)


def _lexer(language: str, code: str):
    """The lexer for the fence's language (guessed from the code when it names none), set to keep the text as it
    is: by default Pygments strips leading and trailing newlines, and a code block that starts with an empty line
    then had every token coloured one character early (issue 37: "de|f", "retur|n")."""
    options = {"stripnl": False, "stripall": False, "ensurenl": False}
    try:
        if language:
            return get_lexer_by_name(language, **options)
        guessed = guess_lexer(code, **options)
    except ClassNotFound:
        return TextLexer(**options)
    if guessed.analyse_text(code) >= SURE_GUESS:
        return guessed
    # Pygments' guess for a short snippet with no tell-tale sign is close to random (a Python function came out
    # as TeraTerm macro or ECL): code that parses as Python is Python, anything else is left uncoloured.
    return PythonLexer(**options) if _parses_as_python(code) else TextLexer(**options)


def _parses_as_python(code: str) -> bool:
    """Whether `code` is Python syntax (parsed only, never run)."""
    try:
        ast.parse(code)
    except Exception:  # SyntaxError, ValueError (a NUL), RecursionError (deep nesting), MemoryError
        return False
    return True


def _token_colour(token, palette: dict) -> str | None:
    for name, kind in (("Comment", Comment), ("String", String), ("Number", Number), ("Keyword", Keyword),
                       ("Name.Function", Name.Function), ("Name.Class", Name.Class),
                       ("Name.Builtin", Name.Builtin), ("Operator", Operator)):
        if token in kind:
            return palette[name]
    return None
