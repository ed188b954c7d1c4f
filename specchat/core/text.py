"""Checks on text that arrives from outside (an imported chat, a request to the server, a message to prompt with).

JSON's \\u escapes can carry a lone surrogate ("\\ud800" without its pair): Python keeps it in a str, but it is not
a Unicode character, so no tokenizer reads it, the database cannot store it and no JSON answer can repeat it. Each
caller refuses such text with its own error and message; this finds it.
"""

from __future__ import annotations


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (a code point U+D800..U+DFFF, which UTF-8 cannot encode), or
    None when the text is all characters."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None
