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


def not_utf8(text: str, what: str) -> str | None:
    """Why `text` (the command line's or a terminal's, which Python decodes with surrogateescape) cannot be read,
    naming `what` ("the prompt") and the first byte that is not UTF-8; None when it is all characters. A byte
    that does not decode arrives as U+DC80..U+DCFF, a lone surrogate that no tokenizer reads."""
    index = lone_surrogate(text)
    if index is None:
        return None
    code = ord(text[index])
    byte = f"byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
    return (f"{what} is not UTF-8 text ({byte} at character {index + 1}): set the terminal or the file to UTF-8 "
            "and try again")


# Characters that change how a terminal shows what follows: the C0 and C1 controls (newline and escape included) and
# the bidirectional formatting marks, which can show a name backwards ("txt.exe" as "exe.txt": Trojan Source), and
# the surrogates a name's undecodable bytes become.
_UNSEEN = {*range(0x00, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
           *range(0x2066, 0x206A), *range(0xD800, 0xE000)}


def visible_name(name: str) -> str:
    """A file's name as one line may show it: each control, bidirectional mark or surrogate written as Python
    escapes it (\\n, \\x1b, \\u202e), every other character as it is."""
    return "".join(c.encode("unicode_escape", "backslashreplace").decode("ascii") if ord(c) in _UNSEEN else c
                   for c in name)


def one_line(text: str) -> str:
    """`text` as a one-line label (a chat's title): each control character or bidirectional mark made a space
    (a title from an imported file may hold NUL, ESC or U+202E), runs of white space made one space, none at
    either end."""
    return " ".join("".join(" " if ord(c) in _UNSEEN and not 0xD800 <= ord(c) < 0xE000 else c
                            for c in text).split())
