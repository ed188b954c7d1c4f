"""A Word document's text through python-docx: the body's paragraphs and tables in document order, after the zip
has been checked with `zipfile` alone, from its central directory, so that a zip bomb is refused before anything
inflates.

The check: at most max_zip_members members; their declared sizes together within max_unpacked_bytes; the main XML
part within max_docx_xml_bytes; no member over a MiB inflating more than max_zip_ratio times its compressed size.
Then each member is inflated a MiB at a time and thrown away, so that one lying about its size is caught (zipfile
stops a member at its declared size and its CRC then fails) before python-docx reads it: zipfile's `read()` of a
whole member inflates all its compressed bytes in one call, and cuts to the declared size only afterwards (a 1 MB
member declaring 4 KB took 2 GiB there). python-docx parses XML without resolving entities.
Left out: headers, footers, footnotes, comments, text boxes and images (docs/documents.md).
"""

from __future__ import annotations

import io
import zipfile
import zlib

import docx
from docx.oxml.ns import qn
from docx.table import Table

from ..core.errors import DocumentError, first_line
from .budget import MiB, ReadBudget
from .formats import clean_text

_OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: an encrypted Office file or an old .doc
_MAIN_PART = "word/document.xml"
_WORD_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # what Word and LibreOffice write
_ENCRYPTED_FLAG = 0x1  # a zip member's general-purpose flag: encrypted
_RATIO_FLOOR = MiB  # a member smaller than this may compress as well as it likes
_BLOCKS_PER_STEP = 256  # paragraphs and tables read between two checks of Cancel and the deadline
_P, _TBL, _SDT, _SDT_CONTENT = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")
_R, _T, _TAB, _BR, _CR = qn("w:r"), qn("w:t"), qn("w:tab"), qn("w:br"), qn("w:cr")


def read_docx(data: bytes, budget: ReadBudget) -> str:
    """The text of the DOCX in `data`: a blank line between paragraphs, a table's rows one per line with their cells
    separated by tabs. Raises DocumentError for an encrypted, damaged or oversized file (the zip checked first)."""
    name = budget.name
    if data.startswith(_OLE_SIGNATURE):
        raise DocumentError(f"{name} is password-protected or an old Word .doc file inside: save a copy as .docx "
                            f"without a password and attach that.")
    check_zip(data, budget)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as error:  # a hostile file reaches any error of zipfile, lxml or python-docx
        raise DocumentError(f"{name} is damaged or not a Word document ({first_line(error)}); open it in Word or "
                            f"LibreOffice, save a new copy and attach that.") from None
    return clean_text(_body_text(document, budget))


def check_zip(data: bytes, budget: ReadBudget) -> None:
    """Refuses (DocumentError) a DOCX whose zip is not a zip, has no Word document part, or would inflate past the
    limits (the module says which), first from its central directory alone, then inflating each member a MiB at a
    time to check that it holds what it declares."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as error:
        raise DocumentError(f"{budget.name} is damaged or not a Word document (its zip cannot be read: "
                            f"{first_line(error)}); save a new copy and attach that.") from None
    _check_declared_sizes(archive.infolist(), budget)
    _check_inflated_sizes(archive, budget)


def _check_declared_sizes(members: list[zipfile.ZipInfo], budget: ReadBudget) -> None:
    """Refuses a zip whose central directory declares too many members, too many bytes in all or in the main part,
    or a member that inflates too many times its size; nothing is inflated."""
    name, limits = budget.name, budget.limits
    if len(members) > limits.max_zip_members:
        raise DocumentError(f"{name} has {len(members):,} parts inside, more than a Word document has "
                            f"(at most {limits.max_zip_members:,}); specchat did not open it.")
    unpacked = sum(member.file_size for member in members)
    if unpacked > limits.max_unpacked_bytes:
        raise DocumentError(f"{name} would unpack to {unpacked / MiB:,.0f} MiB, more than the "
                            f"{limits.max_unpacked_bytes / MiB:,.0f} MiB specchat allows (a zip bomb?); it was not "
                            f"unpacked.")
    for member in members:
        if member.compress_type not in _WORD_COMPRESSIONS or member.flag_bits & _ENCRYPTED_FLAG:
            raise DocumentError(f"{name} is encrypted or packed in a way Word does not write; open it in Word or "
                                f"LibreOffice, save a new copy without a password and attach that.")
        ratio = member.file_size / max(1, member.compress_size)
        if member.file_size > _RATIO_FLOOR and ratio > limits.max_zip_ratio:
            raise DocumentError(f"{name} holds a part that would inflate {ratio:,.0f} times (a zip bomb?); it was "
                                f"not unpacked.")
    main = next((member for member in members if member.filename == _MAIN_PART), None)
    if main is None:
        raise DocumentError(f"{name} is not a Word document (it has no {_MAIN_PART}); attach a .docx that Word or "
                            f"LibreOffice saved.")
    if main.file_size > limits.max_docx_xml_bytes:
        raise DocumentError(f"{name}'s text part is {main.file_size / MiB:,.0f} MiB, more than the "
                            f"{limits.max_docx_xml_bytes / MiB:,.0f} MiB specchat reads; split the document.")


def _check_inflated_sizes(archive: zipfile.ZipFile, budget: ReadBudget) -> None:
    """Inflates every member a MiB at a time, keeping nothing, so that a member whose data does not match its
    declared size or CRC is refused as damaged before python-docx reads it whole; Cancel and the deadline are heard
    between MiBs. Steps progress over the first tenth of the extraction."""
    members = archive.infolist()
    declared = max(1, sum(member.file_size for member in members))
    inflated = 0
    try:
        for member in members:
            with archive.open(member) as stream:
                while chunk := stream.read(MiB):
                    inflated += len(chunk)
                    budget.step(0.1 * inflated / declared)
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, ValueError) as error:
        raise DocumentError(f"{budget.name} is damaged or not a Word document ({first_line(error)}); open it in "
                            f"Word or LibreOffice, save a new copy and attach that.") from None


def _body_text(document, budget: ReadBudget) -> str:
    """The body's blocks in document order, each paragraph's text and each table's rows, joined by blank lines;
    within max_chars."""
    blocks = list(_blocks(document.element.body))
    pieces: list[str] = []
    length = 0
    for index, block in enumerate(blocks):
        if index % _BLOCKS_PER_STEP == 0:
            budget.step(0.1 + 0.9 * index / max(1, len(blocks)))
        text = _paragraph_text(block) if block.tag == _P else _table_text(Table(block, document))
        if text.strip():
            pieces.append(text)
            length += len(text) + 2
            budget.refuse_chars(length)
    return "\n\n".join(pieces)


def _blocks(container):
    """The paragraphs (w:p) and tables (w:tbl) of a body in order, those inside content controls (w:sdt) too."""
    for child in container.iterchildren(_P, _TBL, _SDT):
        if child.tag == _SDT:
            for content in child.iterchildren(_SDT_CONTENT):
                yield from _blocks(content)
        else:
            yield child


def _paragraph_text(paragraph) -> str:
    """A paragraph's text from its XML: every w:t (in runs, links, fields' results, tracked insertions; a tracked
    deletion's w:delText is not one), a tab as a tab, a line break as a line end. python-docx's Paragraph.text
    skips runs inside w:ins, so a document with unaccepted changes would lose their text."""
    parts = []
    for element in paragraph.iter(_T, _TAB, _BR, _CR):
        if element.tag == _T:
            parts.append(element.text or "")
        elif element.getparent().tag == _R:  # not a tab stop of the paragraph's properties
            parts.append("\t" if element.tag == _TAB else "\n")
    return "".join(parts)


def _table_text(table: Table) -> str:
    """A table's text: one line per row, its cells separated by tabs (a merged cell said once), a cell's own
    paragraphs (and those of a table nested in it) joined by spaces."""
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if cell._tc in seen:  # a merged cell comes back once per grid column it spans
                continue
            seen.add(cell._tc)
            cells.append(" ".join(" ".join(_paragraph_text(p) for p in cell._tc.iter(_P)).split()))
        rows.append("\t".join(cells).rstrip())
    return "\n".join(row for row in rows if row)
