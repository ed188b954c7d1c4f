"""Real files for the document-reading tests, built byte by byte: PDFs in PDF syntax (with text, with only an
image, encrypted with the standard RC4 handler), zips of hand-made members (a DOCX whose part is a zip bomb, honest
or lying about its size). Each builder returns the file's bytes; docs/measure/read_pdf.py uses pdf_with_pages too.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile
import zlib

# --- PDF ------------------------------------------------------------------------------------------------------------

_PASSWORD_PAD = bytes.fromhex("28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a")


def _pdf_string(text: str) -> bytes:
    """`text` (Latin-1) as a PDF literal string."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1") + b")"


def text_content(lines: list[str]) -> bytes:
    """A page's content stream that shows `lines` in Helvetica, one under another."""
    shown = b" T* ".join(_pdf_string(line) + b" Tj" for line in lines)
    return b"BT /F1 11 Tf 14 TL 56 780 Td " + shown + b" ET"


def image_content() -> bytes:
    """A page's content stream that draws a 16x16 grey image over most of the page and no text: a scan's look."""
    pixels = bytes((x * 16 + y) % 251 for x in range(16) for y in range(16))
    return b"q 480 0 0 700 56 70 cm BI /W 16 /H 16 /CS /G /BPC 8 ID " + pixels + b" EI Q"


def pdf_with_pages(page_lines: list[list[str]]) -> bytes:
    """A PDF with one page per entry of `page_lines`, each showing its lines of text."""
    return build_pdf([text_content(lines) for lines in page_lines])


def _rc4(key: bytes, data: bytes) -> bytes:
    """RC4, the cipher of the PDF standard security handler's revision 2."""
    box = list(range(256))
    j = 0
    for i in range(256):
        j = (j + box[i] + key[i % len(key)]) % 256
        box[i], box[j] = box[j], box[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + box[i]) % 256
        box[i], box[j] = box[j], box[i]
        out.append(byte ^ box[(box[i] + box[j]) % 256])
    return bytes(out)


class _Rc4Encryption:
    """The standard security handler, revision 2 (40-bit RC4), for a user password: its /Encrypt dictionary and the
    key each object's streams are encrypted with."""

    permissions = -44

    def __init__(self, user_password: str, owner_password: str, file_id: bytes):
        user = (user_password.encode("latin-1") + _PASSWORD_PAD)[:32]
        owner = (owner_password.encode("latin-1") + _PASSWORD_PAD)[:32]
        self.owner_entry = _rc4(hashlib.md5(owner).digest()[:5], user)
        self.key = hashlib.md5(user + self.owner_entry + struct.pack("<i", self.permissions) + file_id).digest()[:5]
        self.user_entry = _rc4(self.key, _PASSWORD_PAD)

    def dictionary(self) -> bytes:
        return (b"<< /Filter /Standard /V 1 /R 2 /Length 40 /P %d /O <%s> /U <%s> >>"
                % (self.permissions, self.owner_entry.hex().encode(), self.user_entry.hex().encode()))

    def encrypt(self, number: int, data: bytes) -> bytes:
        object_key = hashlib.md5(self.key + struct.pack("<I", number)[:3] + b"\x00\x00").digest()[:10]
        return _rc4(object_key, data)


def build_pdf(contents: list[bytes], user_password: str | None = None) -> bytes:
    """A PDF whose pages have the given content streams (Helvetica as /F1), with a correct cross-reference table;
    encrypted with RC4 for `user_password` when one is given."""
    file_id = hashlib.md5(b"".join(contents)).digest()
    encryption = _Rc4Encryption(user_password, "owner-" + user_password, file_id) if user_password else None
    page_count = len(contents)
    page_numbers = [4 + 2 * index for index in range(page_count)]
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [%s] /Count %d >>"
                  % (b" ".join(b"%d 0 R" % number for number in page_numbers), page_count),
               3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"}
    for number, content in zip(page_numbers, contents):
        objects[number] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R "
                           b">> >> /Contents %d 0 R >>" % (number + 1))
        stream = encryption.encrypt(number + 1, content) if encryption else content
        objects[number + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    trailer_extra = b""
    if encryption:
        encrypt_number = max(objects) + 1
        objects[encrypt_number] = encryption.dictionary()
        trailer_extra = b" /Encrypt %d 0 R" % encrypt_number
    return _serialize(objects, trailer_extra + b" /ID [<%s> <%s>]" % (file_id.hex().encode(), file_id.hex().encode()))


def _serialize(objects: dict[int, bytes], trailer_extra: bytes) -> bytes:
    """The objects written out with their cross-reference table and trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref_at = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (size, trailer_extra, xref_at)
    return bytes(out)


# --- zips -----------------------------------------------------------------------------------------------------------

class ZipMember:
    """One member of a hand-made zip: its name, its raw deflate data, the CRC and size of what it inflates to, and
    the size its headers declare (which a lying zip sets below the real size)."""

    def __init__(self, name: str, deflated: bytes, crc: int, real_size: int, declared_size: int | None = None):
        self.name, self.deflated, self.crc = name, deflated, crc
        self.real_size = real_size
        self.declared_size = real_size if declared_size is None else declared_size


def deflated_member(name: str, data: bytes) -> ZipMember:
    """A member holding `data`, deflated."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return ZipMember(name, compressor.compress(data) + compressor.flush(), zlib.crc32(data), len(data))


def zeros_member(name: str, size_mib: int, declared_size: int | None = None) -> ZipMember:
    """A member that inflates to `size_mib` MiB of zeros from about a thousandth of that: one MiB's deflate block
    repeated (each ends with a full flush, so the blocks are identical and concatenate). Its headers declare its
    real size, or `declared_size`."""
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size_mib):
        crc = zlib.crc32(zeros, crc)
    deflated = first + block * (size_mib - 1) + compressor.flush()
    return ZipMember(name, deflated, crc, size_mib << 20, declared_size)


def build_zip(members: list[ZipMember]) -> bytes:
    """A zip (no zip64) of `members`, each deflated, with local headers and a central directory."""
    out = bytearray()
    central = bytearray()
    for member in members:
        name = member.name.encode("utf-8")
        header = struct.pack("<HHHHHIIIHH", 20, 0, 8, 0, 0, member.crc, len(member.deflated), member.declared_size,
                             len(name), 0)
        central += b"PK\x01\x02" + struct.pack("<H", 20) + header + struct.pack("<HHHII", 0, 0, 0, 0, len(out)) + name
        out += b"PK\x03\x04" + header + name + member.deflated
    directory_at = len(out)
    out += central
    out += b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, len(members), len(members), len(central), directory_at, 0)
    return bytes(out)


def docx_members(docx_bytes: bytes) -> list[ZipMember]:
    """The members of a real DOCX, deflated again as hand-made members (to swap one for a bomb)."""
    with zipfile.ZipFile(io.BytesIO(docx_bytes)) as archive:
        return [deflated_member(info.filename, archive.read(info)) for info in archive.infolist()]
