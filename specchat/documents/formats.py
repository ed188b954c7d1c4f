"""Which formats specchat reads, by a file's name, and the readers of the plain ones: text, Markdown and source code
(decoded strictly: UTF-8, or UTF-16 by its byte-order mark), and HTML (the standard library's parser, no network,
no entities beyond HTML's fixed table). PDF and DOCX have their own modules.

Each reader takes the file's bytes (already read within the size bound) and a ReadBudget, and returns the text;
each failure is a DocumentError whose one line names the file.
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser

from ..core.errors import DocumentError
from ..core.text import lone_surrogate
from .budget import ReadBudget

READABLE = "text, Markdown, source code, PDF, DOCX (Word) and HTML files"

_CODE_SUFFIXES = tuple(  # in order: the file dialog lists them so (a set's order changed with every run)
    ".py .pyi .pyx .ipynb .js .mjs .cjs .jsx .ts .tsx .c .h .cc .cpp .cxx .hpp .hh .hxx .rs .go .java .kt .kts "
    ".scala .rb .php .pl .pm .swift .m .mm .cs .fs .lua .r .jl .sh .bash .zsh .fish .ps1 .bat .cmd .sql .json "
    ".jsonl .yaml .yml .toml .ini .cfg .conf .env .csv .tsv .xml .css .scss .sass .less .vue .svelte .dart .hs .ml "
    ".mli .ex .exs .erl .clj .el .vim .gradle .cmake .mk .proto .graphql .tf .nix .zig .asm .s .f90 .v .sv .vhd "
    ".diff .patch .dockerfile".split())
_CODE_NAMES = frozenset({"makefile", "dockerfile", "gnumakefile", "cmakelists.txt", "justfile", "vagrantfile"})
KIND_BY_SUFFIX = {  # the file dialog's order: the documents people attach most first, source code last
    ".pdf": "pdf",
    ".docx": "docx",
    **{suffix: "markdown" for suffix in (".md", ".markdown", ".mdown", ".mkd", ".mdx")},
    **{suffix: "text" for suffix in (".txt", ".text", ".log", ".rst", ".tex", ".org", ".adoc", ".srt", ".vtt")},
    **{suffix: "html" for suffix in (".html", ".htm", ".xhtml")},
    **{suffix: "code" for suffix in _CODE_SUFFIXES},
}
_HINTS = {  # formats people attach that specchat does not read, with what to do instead
    ".doc": "an old Word .doc file: open it in Word or LibreOffice, save it as .docx and attach that",
    ".odt": "an OpenDocument file: save it as .docx or PDF and attach that",
    ".rtf": "a Rich Text file: save it as .docx or plain text and attach that",
    ".pages": "a Pages file: export it as .docx or PDF and attach that",
}

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufffe\uffff]")  # C0 controls but \t \n \f \r; non-characters
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL_SAMPLE = 1 << 20  # characters looked at for the share of control characters
_BINARY_CONTROL_SHARE = 0.05  # more control characters than this, and it is not text


def kind_of(name: str) -> str:
    """The kind (one of model.KINDS) specchat reads the file named `name` as, by its extension (a file without one,
    or a Makefile, Dockerfile..., as text or code); raises DocumentError naming the format specchat does not read."""
    lowered = name.lower()
    if lowered in _CODE_NAMES:
        return "code"
    suffix = "." + lowered.rsplit(".", 1)[1] if "." in lowered.strip(".") else ""
    if not suffix:
        return "text"
    if suffix in KIND_BY_SUFFIX:
        return KIND_BY_SUFFIX[suffix]
    if suffix in _HINTS:
        raise DocumentError(f"{name} is {_HINTS[suffix]}.")
    raise DocumentError(f"specchat cannot read {suffix} files such as {name}; it reads {READABLE}.")


def clean_text(text: str) -> str:
    """The text as a Document holds it: line ends as \\n, control characters (but tab and form feed) and
    non-characters dropped, lone surrogates replaced by U+FFFD (the database and every tokenizer refuse them)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    if lone_surrogate(text) is not None:
        text = _SURROGATE.sub("\ufffd", text)
    return text


# --- text, Markdown, code -------------------------------------------------------------------------------------------

def decode_text(data: bytes, name: str) -> str:
    """`data` as text: UTF-8 (a byte-order mark allowed), or UTF-16 by its byte-order mark. Raises DocumentError for
    binary data (NUL bytes, or many control characters) and for text in another encoding."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as error:
            raise DocumentError(f"{name} starts like UTF-16 text but is not valid UTF-16 (at byte "
                                f"{error.start:,}); save it as UTF-8 and attach it again.") from None
    else:
        if b"\x00" in data:
            raise DocumentError(f"{name} holds binary data, not text (it has NUL bytes); specchat reads {READABLE}.")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            if _looks_binary(data[:_CONTROL_SAMPLE].decode("latin-1")):
                raise DocumentError(f"{name} holds binary data, not text; specchat reads {READABLE}.") from None
            raise DocumentError(
                f"{name} is not UTF-8 text (byte {error.start:,} is not UTF-8): save it as UTF-8 (or UTF-16 with "
                f"a byte-order mark) and attach it again.") from None
    if _looks_binary(text[:_CONTROL_SAMPLE]):
        raise DocumentError(f"{name} holds binary data, not text (mostly control characters); specchat reads "
                            f"{READABLE}.")
    return text


def _looks_binary(sample: str) -> bool:
    """Whether more than 5% of `sample` are control characters (text has tabs and line ends, binary data has the
    rest of C0)."""
    return bool(sample) and len(_CONTROL.findall(sample)) > _BINARY_CONTROL_SHARE * len(sample)


def read_text(data: bytes, budget: ReadBudget) -> str:
    """A text, Markdown or code file's text (decode_text), cleaned, within max_chars."""
    text = clean_text(decode_text(data, budget.name))
    budget.refuse_chars(len(text))
    return text


# --- HTML -----------------------------------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
_HTML_CHUNK = 1 << 16  # characters fed to the parser between two checks of Cancel and the deadline


def decode_html(data: bytes, name: str) -> str:
    """An HTML file's text: by its byte-order mark, else UTF-8, else the charset its <meta> declares in its first
    2 KB (an old page's windows-1252), else refused as decode_text refuses it."""
    if data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return decode_text(data, name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    declared = _META_CHARSET.search(data[:2048])
    if declared is not None and b"\x00" not in data:
        try:
            if codecs.lookup(declared.group(1).decode("ascii")).name not in ("utf-8", "utf-7"):
                return data.decode(declared.group(1).decode("ascii"), errors="replace")
        except (LookupError, UnicodeError):
            pass  # not a text encoding Python knows: refused below, as plain text would be
    return decode_text(data, name)


def read_html(data: bytes, budget: ReadBudget) -> str:
    """An HTML file's visible text: scripts, styles and the head dropped, a blank line between blocks (paragraphs,
    headings, tables), a line per list item, row and <br>, cells separated by tabs, <pre> kept as written. Fed to
    the parser in chunks, with Cancel, the deadline and max_chars checked between them."""
    markup = decode_html(data, budget.name)
    parser = _VisibleText(budget)
    for start in range(0, len(markup), _HTML_CHUNK):
        budget.step(start / max(1, len(markup)))
        parser.feed(markup[start:start + _HTML_CHUNK])
    parser.close()
    return clean_text(parser.text())


_SKIPPED = frozenset({"script", "style", "head", "title", "noscript", "template", "svg", "math", "iframe", "object"})
_HEAD_CONTENT = frozenset({"head", "title", "meta", "link", "style", "script", "base", "noscript", "template"})
_PARAGRAPHS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "dl", "blockquote", "pre",
                         "section", "article", "header", "footer", "nav", "aside", "main", "figure", "form",
                         "fieldset", "details", "hr", "address"})
_LINES = frozenset({"br", "li", "tr", "dt", "dd", "div", "caption", "summary", "figcaption", "option"})
_CELLS = frozenset({"td", "th"})
_WHITESPACE = re.compile(r"\s+")


class _VisibleText(HTMLParser):
    """Gathers the text a browser would show, with the breaks between blocks (read_html says which)."""

    def __init__(self, budget: ReadBudget):
        super().__init__(convert_charrefs=True)
        self._budget = budget
        self._pieces: list[str] = []
        self._chars = 0
        self._skipping: list[str] = []  # the open elements whose content is not shown
        self._preformatted = 0
        self._pending_newlines = 0  # the break owed before the next text
        self._pending_tab = False
        self._ends_with_space = True

    def handle_starttag(self, tag: str, attrs) -> None:
        """An opening tag: starts skipping (a script, the head...) or preformatted text, and owes its break."""
        if self._skipping[:1] == ["head"] and tag not in _HEAD_CONTENT:  # a page that never closes its head
            self._skipping.clear()
        if tag in _SKIPPED:
            self._skipping.append(tag)
        elif tag == "pre":
            self._preformatted += 1
        self._break_for(tag, opening=True)

    def handle_startendtag(self, tag: str, attrs) -> None:
        """A self-closing tag (<br/>, <hr/>): its break, never content to skip."""
        self._break_for(tag, opening=True)

    def handle_endtag(self, tag: str) -> None:
        """A closing tag: ends what it opened (skipping, preformatted text) and owes its break."""
        if tag in self._skipping:  # closes it and whatever was left open inside it
            del self._skipping[len(self._skipping) - 1 - self._skipping[::-1].index(tag):]
        elif tag == "pre" and self._preformatted:
            self._preformatted -= 1
        self._break_for(tag, opening=False)

    def _break_for(self, tag: str, opening: bool) -> None:
        """Owes the break a tag makes: a blank line for a paragraph-like block, a line end for a line-like one, a
        tab before a table cell that is not its row's first."""
        if self._skipping:
            return
        if tag in _PARAGRAPHS:
            self._pending_newlines = max(self._pending_newlines, 2)
        elif tag in _LINES:
            self._pending_newlines = max(self._pending_newlines, 1)
        elif tag in _CELLS and opening and self._pending_newlines == 0 and self._pieces:
            self._pending_tab = True

    def handle_data(self, data: str) -> None:
        """Text (entities already decoded): dropped while skipping, else its whitespace collapsed outside <pre>
        and emitted after the break or tab it is owed."""
        if self._skipping:
            return
        if not self._preformatted:
            data = _WHITESPACE.sub(" ", data)
            if self._ends_with_space or self._pending_newlines or self._pending_tab:
                data = data.lstrip(" ")
            if not data:
                return
        if self._pieces and self._pending_newlines:
            self._emit("\n" * self._pending_newlines)
        elif self._pieces and self._pending_tab:
            self._emit("\t")
        self._pending_newlines, self._pending_tab = 0, False
        self._emit(data)

    def _emit(self, piece: str) -> None:
        """Adds a piece of text (a space before a break is dropped), within max_chars."""
        if piece[0] in "\n\t" and self._pieces and self._pieces[-1].endswith(" "):
            self._pieces[-1] = self._pieces[-1].rstrip(" ")
        self._pieces.append(piece)
        self._chars += len(piece)
        self._ends_with_space = piece[-1] in " \n\t"
        self._budget.refuse_chars(self._chars)

    def text(self) -> str:
        """The gathered text, without trailing spaces."""
        return "".join(self._pieces).rstrip()
