"""Hostile and broken files: each is refused with one line that names the file and says what to do, quickly, without
blocking, and (for a zip bomb) without inflating it. docs/reliability.md lists each case beside its test.

Cases: an encrypted PDF, a scanned-like PDF (an image, no text), a damaged PDF; a truncated DOCX, a zip bomb named
.docx (honest about its size, and lying about it), an encrypted Office file named .docx; binary data named .txt,
text in a legacy encoding; a 2 GB (sparse) file; a file that vanishes or changes while it is read (injected from
the progress callback); a link to a device, a FIFO, a folder; an unknown extension; an empty file; a missing file;
a name with a line break."""

import os
import threading
import time
import tracemalloc

import docx
import pypdfium2
import pytest
from document_files import (build_pdf, build_zip, deflated_member, docx_members, image_content, text_content,
                            zeros_member)

from specchat.core.errors import DocumentError
from specchat.documents.reading import read_document


def refused(path, match, **kwargs):
    """Reads `path`, expecting a one-line DocumentError that names the file and matches `match`; returns it."""
    with pytest.raises(DocumentError, match=match) as caught:
        read_document(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and path.name.split("\n")[0] in message
    return message


def small_docx(tmp_path):
    word = docx.Document()
    for number in range(40):
        word.add_paragraph(f"Paragraph {number} of a real document, long enough to compress.")
    path = tmp_path / "real.docx"
    word.save(path)
    return path.read_bytes()


def test_an_encrypted_pdf_is_refused_and_is_really_encrypted(tmp_path):
    data = build_pdf([text_content(["The secret plan."])], user_password="s3cret")
    path = tmp_path / "report.pdf"
    path.write_bytes(data)
    refused(path, r"^report\.pdf is encrypted: specchat cannot read a password-protected PDF; save a copy without "
                  r"the password and attach that\.$")
    opened = pypdfium2.PdfDocument(data, password="s3cret")  # the file is a real encrypted PDF, not a damaged one
    assert opened[0].get_textpage().get_text_range() == "The secret plan."


def test_a_scanned_like_pdf_without_text_is_refused(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(build_pdf([image_content(), image_content()]))
    assert [obj.type for obj in pypdfium2.PdfDocument(path)[0].get_objects()] == [pypdfium2.raw.FPDF_PAGEOBJ_IMAGE]
    refused(path, r"^scan\.pdf has no text layer \(its 2 pages look scanned: images of text\); specchat does not "
                  r"read text from images, so run it through OCR")


def test_a_damaged_pdf_is_refused(tmp_path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\n" + os.urandom(2000).replace(b"%%EOF", b""))
    refused(path, r"^broken\.pdf is damaged or not a PDF \(.*\); open it in a PDF viewer, save a new copy")


def test_a_truncated_docx_is_refused(tmp_path):
    data = small_docx(tmp_path)
    path = tmp_path / "cut.docx"
    path.write_bytes(data[:len(data) // 2])
    refused(path, r"^cut\.docx is damaged or not a Word document \(its zip cannot be read: .*\); save a new copy")


def read_within_bounds(path, match):
    """Refuses `path` with `match`, checking that the read allocated under 16 MiB beyond the file and took under five
    seconds (a 1 GiB inflation takes more than that, and gigabytes): nothing was inflated."""
    size = path.stat().st_size
    tracemalloc.start()
    started = time.perf_counter()
    try:
        refused(path, match)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size + (16 << 20), f"peak {peak / 2**20:.1f} MiB"
    assert elapsed < 5.0


def test_a_zip_bomb_named_docx_is_refused_before_it_inflates(tmp_path):
    members = docx_members(small_docx(tmp_path))
    bomb = [zeros_member(member.name, 1024) if member.name == "word/document.xml" else member for member in members]
    path = tmp_path / "bomb.docx"
    path.write_bytes(build_zip(bomb))
    assert path.stat().st_size < 2 << 20  # a 1 GiB part from about a MiB
    read_within_bounds(path, r"^bomb\.docx would unpack to 1,0\d\d MiB, more than the 200 MiB specchat allows "
                             r"\(a zip bomb\?\); it was not unpacked\.$")


def test_a_zip_bomb_under_the_total_is_refused_by_its_ratio(tmp_path):
    members = docx_members(small_docx(tmp_path))
    bomb = [zeros_member(member.name, 150) if member.name == "word/document.xml" else member for member in members]
    path = tmp_path / "dense.docx"
    path.write_bytes(build_zip(bomb))
    read_within_bounds(path, r"^dense\.docx holds a part that would inflate [\d,]+ times \(a zip bomb\?\); it was "
                             r"not unpacked\.$")


def test_a_zip_bomb_that_lies_about_its_size_inflates_only_what_it_declares(tmp_path):
    members = docx_members(small_docx(tmp_path))
    lying = [zeros_member(member.name, 1024, declared_size=4000) if member.name == "word/document.xml" else member
             for member in members]
    path = tmp_path / "liar.docx"
    path.write_bytes(build_zip(lying))
    read_within_bounds(path, r"^liar\.docx is damaged or not a Word document \(Bad CRC-32 for file "
                             r"'word/document\.xml'\)")


def test_an_encrypted_office_file_named_docx_is_refused(tmp_path):
    path = tmp_path / "locked.docx"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4096))
    refused(path, r"^locked\.docx is password-protected or an old Word \.doc file inside")


def test_a_zip_that_is_not_a_word_document_is_refused(tmp_path):
    path = tmp_path / "other.docx"
    path.write_bytes(build_zip([deflated_member("hello.txt", b"hello")]))
    refused(path, r"^other\.docx is not a Word document \(it has no word/document\.xml\)")


def test_a_docx_packed_in_a_way_word_does_not_write_is_refused_unopened(tmp_path):
    import io
    import zipfile

    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    path = tmp_path / "bzip.docx"
    path.write_bytes(packed.getvalue())
    refused(path, r"^bzip\.docx is encrypted or packed in a way Word does not write; open it in Word")


def test_binary_data_named_txt_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(os.urandom(4096) + b"\x00")
    refused(path, r"^notes\.txt holds binary data, not text \(it has NUL bytes\); specchat reads text, Markdown")
    path.write_bytes(bytes(range(1, 32)) * 100)  # control characters without a NUL
    refused(path, r"^notes\.txt holds binary data, not text \(mostly control characters\)")


def test_text_in_a_legacy_encoding_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("déjà vu, café crème".encode("latin-1"))
    refused(path, r"^latin\.txt is not UTF-8 text \(byte 1 is not UTF-8\): save it as UTF-8")


def test_a_2_gb_file_is_refused_by_its_size_at_once(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as sparse:
        sparse.truncate(2 << 30)
    started = time.perf_counter()
    refused(path, r"^huge\.txt is 2,048 MiB, more than the 64 MiB specchat reads from one file; attach a smaller")
    assert time.perf_counter() - started < 0.5


def test_a_file_that_vanishes_while_it_is_read_is_refused(tmp_path):
    path = tmp_path / "draft.txt"
    path.write_text("some words " * 500_000)  # 5.5 MB: read in several chunks

    def delete_after_the_first_chunk(fraction):
        if fraction > 0 and path.exists():
            path.unlink()

    refused(path, r"^draft\.txt was moved, replaced or deleted while specchat read it; attach it again\.$",
            progress=delete_after_the_first_chunk)


def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text("line\n" * 1_000_000)

    def append_once(fraction, appended=[]):
        if fraction > 0 and not appended:
            appended.append(True)
            with open(path, "a") as more:
                more.write("a new line written meanwhile\n")

    refused(path, r"^log\.txt changed while specchat read it \(is it still being written\?\)",
            progress=append_once)


POSIX_ONLY = pytest.mark.skipif(os.name != "posix", reason="/dev/zero and FIFOs are POSIX's")


@POSIX_ONLY
def test_a_link_to_a_device_is_refused_without_reading_it(tmp_path):
    link = tmp_path / "zeros.txt"
    link.symlink_to("/dev/zero")
    started = time.perf_counter()
    refused(link, r"^zeros\.txt is a device \(or a link to one\), not a regular file; specchat attaches files only\.$")
    assert time.perf_counter() - started < 0.5


@POSIX_ONLY
def test_a_fifo_and_a_folder_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(pytest.raises(DocumentError, read_document, fifo)),
                              daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert str(outcome[0].value) == "pipe.txt is a pipe (or a link to one), not a regular file; specchat attaches " \
                                    "files only."
    folder = tmp_path / "folder.md"
    folder.mkdir()
    refused(folder, r"^folder\.md is a folder, not a regular file")


def test_an_unknown_extension_and_an_old_doc_are_refused_by_name(tmp_path):
    path = tmp_path / "data.xyz"
    path.write_text("anything")
    refused(path, r"^specchat cannot read \.xyz files such as data\.xyz; it reads text, Markdown, source code, PDF, "
                  r"DOCX \(Word\) and HTML files\.$")
    old = tmp_path / "letter.doc"
    old.write_bytes(b"\xd0\xcf\x11\xe0")
    refused(old, r"^letter\.doc is an old Word \.doc file: open it in Word or LibreOffice, save it as \.docx")


def test_an_empty_file_a_blank_file_and_a_missing_file(tmp_path):
    (tmp_path / "empty.md").write_bytes(b"")
    refused(tmp_path / "empty.md", r"^empty\.md is empty; attach a file with text in it\.$")
    (tmp_path / "blank.txt").write_text(" \n\n\t\n")
    refused(tmp_path / "blank.txt", r"^blank\.txt has no text to read")
    refused(tmp_path / "gone.pdf", r"^gone\.pdf was not found; it may have been moved or deleted\.$")


def test_a_name_with_a_line_break_stays_on_one_line(tmp_path):
    path = tmp_path / "two\nlines.txt"
    path.write_bytes(b"\x00binary")
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert str(caught.value).startswith("two?lines.txt holds binary data")
