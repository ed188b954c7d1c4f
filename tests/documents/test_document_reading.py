"""Reading good files of every format into Documents: the text round-trips, a PDF's pages and page starts are right,
a DOCX keeps its paragraphs and tables in order, HTML keeps only what a browser shows, progress is reported and
Cancel is heard. All on real files written here (document_files.py builds the PDFs)."""

import hashlib
import threading

import docx
import docx.shared
import pytest
from docx.oxml.parser import parse_xml
from document_files import build_pdf, image_content, pdf_with_pages, text_content

from specchat.core.errors import DocumentError, ReadCancelled
from specchat.documents.reading import ReadLimits, document_from_text, read_document


def assert_passages_cover(document):
    """The passages are the text cut in order: contiguous, each its own slice."""
    assert document.passages, "a document with text has passages"
    assert "".join(passage.text for passage in document.passages) == document.text
    assert document.passages[0].start == 0 and document.passages[-1].end == len(document.text)
    for position, passage in enumerate(document.passages):
        assert passage.position == position
        assert document.text[passage.start:passage.end] == passage.text
    for before, after in zip(document.passages, document.passages[1:]):
        assert before.end == after.start


@pytest.mark.parametrize("file_name, kind", [("notes.txt", "text"), ("README.md", "markdown"), ("tool.py", "code"),
                                             ("query.SQL", "code"), ("table.csv", "code"), ("Makefile", "code"),
                                             ("LICENSE", "text")])
def test_text_files_round_trip_with_their_kind_hash_and_size(tmp_path, file_name, kind):
    text = "Première ligne — naïve café 😀\n\n\tindented line\nlast line without end"
    path = tmp_path / file_name
    path.write_bytes(text.encode("utf-8"))
    document = read_document(path)
    assert (document.name, document.kind, document.text) == (file_name, kind, text)
    assert document.pages is None and document.page_starts == ()
    assert document.sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert document.size_bytes == len(text.encode("utf-8"))
    assert_passages_cover(document)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be-bom"])
def test_a_byte_order_mark_picks_the_encoding_and_line_ends_become_newlines(tmp_path, encoding):
    text = "Grüße\r\naus Köln\rund 😀\n"
    if encoding == "utf-16-be-bom":
        data = b"\xfe\xff" + text.encode("utf-16-be")
    else:
        data = text.encode(encoding)
    (tmp_path / "note.txt").write_bytes(data)
    assert read_document(tmp_path / "note.txt").text == "Grüße\naus Köln\nund 😀\n"


def test_a_pdfs_pages_and_page_starts(tmp_path):
    pages = [["Page one opens here.", "It has (parentheses) and a backslash \\."], ["Page two."], ["Page three ends."]]
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf_with_pages(pages))
    document = read_document(path)
    assert (document.kind, document.pages, len(document.page_starts)) == ("pdf", 3, 3)
    assert document.page_starts[0] == 0
    for number, lines in enumerate(pages):
        start = document.page_starts[number]
        end = document.page_starts[number + 1] if number + 1 < len(pages) else len(document.text)
        assert document.text[start:end].strip() == "\n".join(lines)
        assert document.page_at(start) == number + 1
    assert "\r" not in document.text
    assert_passages_cover(document)


def test_a_long_pdfs_passages_name_the_page_they_start_on(tmp_path):
    sentence = "This sentence is about page {page} and it goes on for a while."
    pages = [[sentence.format(page=page)] * 40 for page in range(1, 6)]
    path = tmp_path / "long.pdf"
    path.write_bytes(pdf_with_pages(pages))
    document = read_document(path)
    assert_passages_cover(document)
    assert len(document.passages) > 5
    for passage in document.passages:
        visible = passage.text.strip()
        assert f"about page {passage.page} " in visible.split("\n")[0] + " ", passage
        assert passage.page == document.page_at(passage.start + len(passage.text) - len(passage.text.lstrip()))
    assert {passage.page for passage in document.passages} == {1, 2, 3, 4, 5}


def test_a_pdf_with_text_on_some_pages_reads_and_keeps_its_blank_pages(tmp_path):
    path = tmp_path / "mixed.pdf"
    path.write_bytes(build_pdf([text_content(["Only text page."]), image_content()]))
    document = read_document(path)
    assert document.pages == 2 and document.text.strip() == "Only text page."
    assert document.page_starts[1] == len(document.text)


def test_a_docx_keeps_paragraphs_and_tables_in_document_order(tmp_path):
    word = docx.Document()
    word.add_heading("Quarterly report", level=1)
    word.add_paragraph("Sales rose in the north.")
    table = word.add_table(rows=2, cols=3)
    for row, values in zip(table.rows, [("Region", "Q1", "Q2"), ("North", "10", "12")]):
        for cell, value in zip(row.cells, values):
            cell.text = value
    merged = word.add_table(rows=1, cols=2)
    merged.cell(0, 0).merge(merged.cell(0, 1)).text = "one merged cell"
    word.add_paragraph("After the tables.")
    path = tmp_path / "report.docx"
    word.save(path)
    document = read_document(path)
    assert document.kind == "docx" and document.pages is None
    assert document.text == ("Quarterly report\n\nSales rose in the north.\n\nRegion\tQ1\tQ2\nNorth\t10\t12\n\n"
                             "one merged cell\n\nAfter the tables.")
    assert_passages_cover(document)


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def test_a_docx_keeps_tracked_insertions_breaks_and_content_controls_and_drops_deletions(tmp_path):
    word = docx.Document()
    changed = word.add_paragraph("Kept ")
    changed.paragraph_format.tab_stops.add_tab_stop(docx.shared.Inches(1))  # a w:tab in the properties: no text
    changed._p.append(parse_xml(f'<w:ins {W} w:id="1" w:author="a"><w:r><w:t>inserted</w:t></w:r></w:ins>'))
    changed._p.append(parse_xml(f'<w:del {W} w:id="2" w:author="a"><w:r><w:delText>deleted</w:delText></w:r></w:del>'))
    run = changed.add_run(" then")
    run.add_tab()
    run.add_text("tabbed")
    run.add_break()
    run.add_text("next line")
    word.element.body.insert(len(word.element.body) - 1, parse_xml(
        f'<w:sdt {W}><w:sdtContent><w:p><w:r><w:t>In a content control.</w:t></w:r></w:p></w:sdtContent></w:sdt>'))
    path = tmp_path / "changes.docx"
    word.save(path)
    assert read_document(path).text == "Kept inserted then\ttabbed\nnext line\n\nIn a content control."


def test_html_keeps_what_a_browser_shows(tmp_path):
    page = ("<!DOCTYPE html><html><head><title>Hidden title</title><style>p {color: red}</style>"
            "<script>document.write('<p>no</p>')</script></head><body><h1>Heading</h1>"
            "<p>One &amp; two &lt;three&gt;   spaced\n out</p><ul><li>first</li><li>second</li></ul>"
            "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
            "<pre>  keep\n    this</pre><p>end<br>line &#x1F600;</p><img src='http://example.invalid/x.png'>"
            "<noscript>no script</noscript></body></html>")
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    document = read_document(path)
    assert document.kind == "html"
    assert document.text == ("Heading\n\nOne & two <three> spaced out\n\nfirst\nsecond\n\na\tb\n1\t2\n\n"
                             "  keep\n    this\n\nend\nline 😀")


def test_html_in_a_declared_legacy_charset(tmp_path):
    page = '<html><head><meta charset="windows-1252"></head><body><p>café – “quoted”</p></body></html>'
    (tmp_path / "old.htm").write_bytes(page.encode("cp1252"))
    assert read_document(tmp_path / "old.htm").text == "café – “quoted”"


def test_progress_rises_to_one_and_cancel_stops_the_read(tmp_path):
    path = tmp_path / "book.pdf"
    path.write_bytes(pdf_with_pages([[f"Page {page} text."] for page in range(30)]))
    reported = []
    read_document(path, progress=reported.append)
    assert reported == sorted(reported) and reported[-1] == 1.0 and len(reported) > 30
    cancel = threading.Event()

    def cancel_halfway(fraction):
        if fraction > 0.5:
            cancel.set()

    with pytest.raises(ReadCancelled, match=r"^Reading book\.pdf was cancelled; nothing was attached\.$"):
        read_document(path, cancel=cancel, progress=cancel_halfway)


def test_the_time_limit_and_the_page_and_character_limits(tmp_path):
    path = tmp_path / "book.pdf"
    path.write_bytes(pdf_with_pages([["Some text on this page."]] * 3))
    with pytest.raises(DocumentError, match=r"^book\.pdf took longer than 0 s to read"):
        read_document(path, ReadLimits(max_seconds=0))
    with pytest.raises(DocumentError, match=r"^book\.pdf has 3 pages, more than the 2 specchat reads"):
        read_document(path, ReadLimits(max_pages=2))
    with pytest.raises(DocumentError, match=r"^book\.pdf holds more than 40 characters of text"):
        read_document(path, ReadLimits(max_chars=40))
    (tmp_path / "long.txt").write_text("x" * 100)
    with pytest.raises(DocumentError, match=r"^long\.txt holds more than 99 characters"):
        read_document(tmp_path / "long.txt", ReadLimits(max_chars=99))


def test_pasted_text_becomes_a_document():
    document = document_from_text("pasted", "First line.\r\nSecond line.", kind="markdown")
    assert (document.name, document.kind, document.text, document.pages) == ("pasted", "markdown",
                                                                            "First line.\nSecond line.", None)
    assert document.sha256 == hashlib.sha256(document.text.encode()).hexdigest()
    assert_passages_cover(document)
    with pytest.raises(DocumentError, match=r"^pasted: 'slides' is not a kind of document"):
        document_from_text("pasted", "text", kind="slides")
    with pytest.raises(DocumentError, match=r"^pasted holds a lone surrogate \(U\+D800\) at character 2"):
        document_from_text("pasted", "ab\ud800cd")
    with pytest.raises(DocumentError, match=r"^pasted has no text"):
        document_from_text("pasted", " \n\t ")


def test_html_whose_head_is_never_closed_shows_its_body(tmp_path):
    (tmp_path / "sloppy.html").write_text("<html><head><title>Not shown</title><meta charset=utf-8><p>Shown text.")
    assert read_document(tmp_path / "sloppy.html").text == "Shown text."
