"""Real documents for the draft head's grounded and translation prompts, vendored in resources/documents/.

Two public texts under licences that allow anything:
- Python Enhancement Proposals (github.com/python/peps): each PEP whose Copyright section places it in the public
  domain (or under CC0-1.0, "whichever is more permissive"); prose passages of 70 to 220 words, cut at paragraph
  ends, without code blocks, tables or headers. Real, dense technical prose to summarize, question and extract from.
- The French translation of Python's documentation (github.com/python/python-docs-fr), contributed under CC0-1.0:
  paragraphs of the tutorial, the FAQ and the how-tos, to translate into English.

Neither is a source of Spec-Bench (MT-bench, WMT14, CNN/DailyMail, Natural Questions, GSM8K, DPR's Wikipedia).
`python -m specchat.training.documents PEPS_GIT_DIR DOCS_FR_GIT_DIR` rebuilds the files from git snapshots of the
two repositories (PROVENANCE.md beside them names the commits); the result is seeded and reproducible.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

PEPS, FRENCH = "peps.jsonl.gz", "python-docs-fr.jsonl.gz"
PASSAGE_WORDS = (70, 220)
FRENCH_WORDS = (25, 130)
PASSAGES_PER_PEP = 3
FRENCH_BRANCH = "3.13"
FRENCH_FOLDERS = ("tutorial/", "faq/", "howto/")


def load_documents(name: str) -> list[dict]:
    """The vendored documents (PEPS or FRENCH): dicts with id, source, text."""
    from ..resources import resource

    data = gzip.decompress(resource("documents", name).read_bytes()).decode("utf-8")
    return [json.loads(line) for line in data.splitlines() if line.strip()]


# Light reStructuredText to plain text: what a person would paste into a chat.
_INLINE = [
    (re.compile(r":pep:`(?:[^`<]*<)?(\d+)>?`"), r"PEP \1"),
    (re.compile(r":[a-z:]+:`~?([^`<]*?)\s*(?:<[^`]*>)?`"), r"\1"),
    (re.compile(r"`([^`<]+?)\s*<[^`]*>`__?"), r"\1"),
    (re.compile(r"`([^`]+)`_+"), r"\1"),
    (re.compile(r"``([^`]+)``"), r"\1"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (re.compile(r"\*([^*\s][^*]*)\*"), r"\1"),
    (re.compile(r"\[#?[\w-]*\]_"), ""),
    (re.compile(r"\|([^|]+)\|"), r"\1"),
]


def plain(text: str) -> str:
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    text = re.sub(r"\s*::$", ":", text.strip())
    return re.sub(r"[ \t]+", " ", text)


def _is_prose(paragraph: str) -> bool:
    lines = paragraph.splitlines()
    if not lines or lines[0].startswith((" ", "\t", "..", "+", "=", "|", ">>>")):
        return False  # code, directives, tables, doctests
    if len(lines) > 1 and re.fullmatch(r"[=\-~^\"'`#*+]{3,}", lines[1].strip()):
        return False  # a section title
    if re.fullmatch(r"[=\-~^\"'`#*+]{3,}", lines[0].strip()):
        return False
    return len(re.findall(r"[A-Za-z]{2,}", paragraph)) >= 8


def _public_domain(rst: str) -> bool:
    tail = rst[rst.rfind("Copyright"):] if "Copyright" in rst else ""
    return bool(re.search(r"public domain|CC0", tail, re.IGNORECASE))


def pep_passages(number: str, rst: str, rng: random.Random) -> list[dict]:
    """Up to PASSAGES_PER_PEP prose passages of one PEP, each a run of whole paragraphs within one section."""
    if not _public_domain(rst):
        return []
    title = re.search(r"^Title:\s*(.+)$", rst, re.MULTILINE)
    body = rst.split("\n\n", 1)[1] if "\n\n" in rst else ""
    body = body[: body.rfind("Copyright")] if "Copyright" in body else body
    sections = re.split(r"\n[^\n]+\n[=\-~^]{3,}\n", body)
    passages = []
    for section in sections:
        paragraphs = [plain(p) for p in re.split(r"\n\s*\n", section) if _is_prose(p)]
        run: list[str] = []
        for paragraph in paragraphs + [None]:  # None: the section's end closes the last run
            words = sum(len(p.split()) for p in run)
            if paragraph is None or words + len(paragraph.split()) > PASSAGE_WORDS[1]:
                if PASSAGE_WORDS[0] <= words <= PASSAGE_WORDS[1]:
                    passages.append("\n\n".join(" ".join(p.split()) for p in run))
                run = []
            if paragraph is not None and len(paragraph.split()) <= PASSAGE_WORDS[1]:
                run.append(paragraph)
    rng.shuffle(passages)
    source = f"PEP {int(number)}" + (f": {title.group(1).strip()}" if title else "")
    return [{"id": f"pep-{number}-{i}", "source": source, "text": text}
            for i, text in enumerate(passages[:PASSAGES_PER_PEP])]


def _po_strings(po: str) -> Iterator[str]:
    """Every msgstr of a .po file, its continuation lines joined."""
    for match in re.finditer(r'^msgstr ("(?:[^"\\]|\\.)*"\n(?:"(?:[^"\\]|\\.)*"\n)*)', po, re.MULTILINE):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))
        yield "".join(parts).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def french_paragraphs(path: str, po: str) -> list[dict]:
    kept = []
    for i, text in enumerate(_po_strings(po)):
        text = " ".join(plain(text).split())
        words = len(text.split())
        if FRENCH_WORDS[0] <= words <= FRENCH_WORDS[1] and "``" not in text and "::" not in text \
                and len(re.findall(r"[()\[\]{}=_]", text)) <= 4:
            kept.append({"id": f"fr-{path.removesuffix('.po').replace('/', '-')}-{i}", "source": path, "text": text})
    return kept


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def build(peps_repo: Path, french_repo: Path, out: Path, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    names = [n for n in _git(peps_repo, "ls-tree", "-r", "--name-only", "HEAD", "peps").split()
             if re.fullmatch(r"peps/pep-\d{4}\.rst", n)]
    passages = [p for n in sorted(names) for p in
                pep_passages(n[-8:-4], _git(peps_repo, "show", f"HEAD:{n}"), rng)]
    files = [n for n in _git(french_repo, "ls-tree", "-r", "--name-only", FRENCH_BRANCH).split()
             if n.startswith(FRENCH_FOLDERS) and n.endswith(".po")]
    french = [p for n in sorted(files) for p in french_paragraphs(n, _git(french_repo, "show", f"{FRENCH_BRANCH}:{n}"))]
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in ((PEPS, passages), (FRENCH, french)):
        data = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n"
        (out / name).write_bytes(gzip.compress(data.encode("utf-8"), mtime=0))
    return {PEPS: len(passages), FRENCH: len(french)}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m specchat.training.documents PEPS_GIT_DIR DOCS_FR_GIT_DIR", file=sys.stderr)
        return 2
    out = Path(__file__).resolve().parents[2] / "resources" / "documents"
    for name, count in build(Path(argv[0]), Path(argv[1]), out).items():
        print(f"{out / name}: {count} texts, {(out / name).stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
