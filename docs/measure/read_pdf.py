"""How long `read_document` takes on a text PDF of N pages (default 100), written here with 45 lines of about 70
characters a page (tests/documents/document_files.py builds it), and on the same text as one .txt file.

    .venv/bin/python docs/measure/read_pdf.py [PAGES] [REPEATS]

Prints the file's size, its characters and passages, and each read's wall time (docs/documents.md quotes it).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "documents"))

from document_files import pdf_with_pages  # noqa: E402

from specchat.documents.reading import read_document  # noqa: E402

LINE = "Line {line} of page {page}: the quick brown fox jumps over the lazy dog, again."


def main(pages: int = 100, repeats: int = 3) -> None:
    """Writes the PDF (and the .txt) to a temporary folder and reads each `repeats` times."""
    page_lines = [[LINE.format(line=line, page=page) for line in range(45)] for page in range(1, pages + 1)]
    with tempfile.TemporaryDirectory() as folder:
        pdf_path = Path(folder) / f"text-{pages}-pages.pdf"
        pdf_path.write_bytes(pdf_with_pages(page_lines))
        text_path = Path(folder) / f"text-{pages}-pages.txt"
        text_path.write_text("\n\n".join("\n".join(lines) for lines in page_lines), encoding="utf-8")
        for path in (pdf_path, text_path):
            for attempt in range(repeats):
                started = time.perf_counter()
                document = read_document(path)
                elapsed = time.perf_counter() - started
                print(f"{path.name}: {path.stat().st_size / 1024:,.0f} KiB, {len(document.text):,} characters, "
                      f"{document.pages or '-'} pages, {len(document.passages):,} passages: read {attempt + 1} in "
                      f"{elapsed:.3f} s")


if __name__ == "__main__":
    main(*(int(argument) for argument in sys.argv[1:3]))
