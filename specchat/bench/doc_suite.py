"""The documents suite of `specchat bench --suite documents`, vendored in resources/doc_suite/ (issue 45): how its
two files were drawn from public data (suites.py turns them into prompts, resources/ reads them).

- Proofreading (`ilcowe-texts.jsonl.gz`): whole texts of 120 to 300 words that learners of English wrote, with their
  own spelling and grammar, from the Israeli Learner Corpus of Written English (github.com/HaifaCLG/ILCoWE,
  CC BY-SA 4.0): a seeded sample of 30 from its Arabic-L1 sub-corpus (ArCC) and 30 from its first phase (mostly
  writers bilingual in Hebrew and Arabic).
  Each is asked back corrected and whole: a reply that copies most of its prompt, paragraph by paragraph.
- Long-document question answering (`squad2-documents.jsonl.gz`): documents of 1,500 to 3,000 tokens, each a run of
  consecutive paragraphs of one of the 35 Wikipedia articles of SQuAD 2.0's dev set (CC BY-SA 4.0), as the SQuAD
  explorer's pages (github.com/rajpurkar/SQuAD-explorer, branch gh-pages) show them, with one answerable question
  of those paragraphs: a seeded sample of 60 documents. The answer is a span of the document.

`python -m specchat.bench.doc_suite ILCOWE_GIT_DIR SQUAD_EXPLORER_GIT_DIR` rebuilds both files from git snapshots
of the two repositories (PROVENANCE.md beside them names the commits and checksums); the draw is seeded, so the
result is the same each time. Nothing here trains anything: both files are benchmarks only.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Sequence

PROOFREAD_FILE, DOCUMENT_QA_FILE = "ilcowe-texts.jsonl.gz", "squad2-documents.jsonl.gz"
SEED = "doc-suite"
TEXT_WORDS = (120, 300)
TEXTS_PER_SUBCORPUS = {"ArCC": 30, "ILCoWE Phase 1": 30}
DOCUMENT_TOKENS = (1500, 3000)  # counted with the embedded SmolLM2 tokenizer, the document's title included
DOCUMENTS = 60
SQUAD_PAGES = "explore/v2.0/dev/"
SQUAD_BRANCH = "gh-pages"


def _git_show(git_dir: Path, revision: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{revision}:{path}"], check=True,
                          capture_output=True).stdout


def _is_plain_prose(text: str) -> bool:
    """No tabs, odd separators, foreign script, addresses or links: what a learner typed as English prose."""
    if any(ch in text for ch in "\t\u2028\xa0@") or "http" in text or "www." in text:
        return False
    return all(ord(ch) < 0x0590 or 0x2000 <= ord(ch) < 0x2100 for ch in text)


def ilcowe_texts(git_dir: Path, revision: str = "HEAD") -> list[dict]:
    """The sampled learner texts: TEXTS_PER_SUBCORPUS of each sub-corpus, among the texts of TEXT_WORDS words in
    plain prose, drawn with SEED, in the corpus's order of ids. Each: id, source (the file), subcorpus, l1, level,
    words, text (the file's text, only its outer whitespace stripped)."""
    rows = list(csv.DictReader(io.StringIO(_git_show(git_dir, revision, "metadata.csv").decode("utf-8"))))
    picked = []
    for subcorpus, count in TEXTS_PER_SUBCORPUS.items():
        eligible = []
        for row in rows:
            if row["Subcorpus"] != subcorpus:
                continue
            text = _git_show(git_dir, revision, f"texts/{row['Filename']}").decode("utf-8").strip()
            if TEXT_WORDS[0] <= len(text.split()) <= TEXT_WORDS[1] and _is_plain_prose(text):
                eligible.append((row, text))
        chosen = random.Random(f"{SEED}:{subcorpus}").sample(range(len(eligible)), count)
        picked += [eligible[i] for i in chosen]
    picked.sort(key=lambda pair: int(pair[0]["ID"]))
    return [{"id": f"ilcowe-{row['ID']}", "source": f"texts/{row['Filename']}", "subcorpus": row["Subcorpus"],
             "l1": row["L1"], "level": row["Level"], "words": len(text.split()), "text": text}
            for row, text in picked]


@dataclass
class SquadParagraph:
    context: str
    questions: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (id, question, answers); [] = none


class _ExplorerPage(HTMLParser):
    """One SQuAD explorer page: its title (h1#title), and each paragraph (a <pre>) with its questions
    (div.qa-wrap[data-id], strong.question) and their ground-truth answers (span.answer; span.no-answer: none)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title, self.paragraphs, self._in, self._text = "", [], None, []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if tag == "h1" and attributes.get("id") == "title":
            self._in = "title"
        elif tag == "pre":
            self._in = "context"
        elif tag == "div" and "qa-wrap" in classes:
            self.paragraphs[-1].questions.append((attributes["data-id"], "", []))
        elif tag == "strong" and "question" in classes:
            self._in = "question"
        elif tag == "span" and "answer" in classes:
            self._in = "answer"
        else:
            return
        self._text = []

    def handle_data(self, data):
        if self._in:
            self._text.append(data)

    def handle_endtag(self, tag):
        if self._in is None or tag not in ("h1", "pre", "strong", "span"):
            return
        text, where, self._in = "".join(self._text), self._in, None
        if where == "title":
            self.title = text.strip().replace("_", " ")
        elif where == "context":
            self.paragraphs.append(SquadParagraph(text.strip()))
        elif where == "question":
            qid, _, answers = self.paragraphs[-1].questions[-1]
            self.paragraphs[-1].questions[-1] = (qid, text.strip(), answers)
        else:
            self.paragraphs[-1].questions[-1][2].append(text.strip())


def squad_article(page: str) -> tuple[str, list[SquadParagraph]]:
    """(title, paragraphs in the page's order) of one explorer page's HTML."""
    parser = _ExplorerPage()
    parser.feed(page)
    parser.close()
    return parser.title, parser.paragraphs


def document_windows(title: str, paragraphs: Sequence[SquadParagraph], count_tokens: Callable[[str], int],
                     rng: random.Random) -> list[tuple[int, int, str, int]]:
    """Runs of consecutive paragraphs of one article, from its first paragraph on, each as long as fits a size
    drawn from DOCUMENT_TOKENS (the title line included; a spread of lengths, not all at the cap), and kept when
    it reaches DOCUMENT_TOKENS[0]: (first, last, document, tokens), the document being the title, a blank line,
    then the paragraphs one blank line apart."""
    windows, start = [], 0
    while start < len(paragraphs):
        end, best, size = start, None, rng.randint(*DOCUMENT_TOKENS)
        while end < len(paragraphs):
            text = "\n\n".join([title, *(p.context for p in paragraphs[start:end + 1])])
            tokens = count_tokens(text)
            if tokens > size:
                break
            best, end = (start, end, text, tokens), end + 1
        if best is not None and best[3] >= DOCUMENT_TOKENS[0]:
            windows.append(best)
        start = max(end, start + 1)
    return windows


def squad_documents(git_dir: Path, count_tokens: Callable[[str], int], revision: str = SQUAD_BRANCH) -> list[dict]:
    """DOCUMENTS documents drawn with SEED from every window of every dev article, in the articles' order, each
    with one answerable question of its paragraphs (drawn with SEED too). Each: id (title#first-last), title,
    paragraphs ([first, last], 0-based, in the page), tokens, document, question_id (SQuAD's), question, answers
    (the distinct ground truths)."""
    listing = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "--name-only", f"{revision}:{SQUAD_PAGES}"],
                             check=True, capture_output=True, text=True).stdout.split()
    windows, sizes = [], random.Random(f"{SEED}:sizes")
    for name in sorted(n for n in listing if n.endswith(".html") and n != "index.html"):
        title, paragraphs = squad_article(_git_show(git_dir, revision, SQUAD_PAGES + name).decode("utf-8"))
        for first, last, document, tokens in document_windows(title, paragraphs, count_tokens, sizes):
            answerable = [q for p in paragraphs[first:last + 1] for q in p.questions if q[2]]
            if answerable:
                windows.append((title, first, last, document, tokens, answerable))
    rng, records = random.Random(f"{SEED}:squad"), []
    for title, first, last, document, tokens, answerable in (windows[i] for i in
                                                              sorted(rng.sample(range(len(windows)), DOCUMENTS))):
        qid, question, answers = answerable[rng.randrange(len(answerable))]
        records.append({"id": f"{title}#{first}-{last}", "title": title, "paragraphs": [first, last],
                        "tokens": tokens, "document": document, "question_id": qid, "question": question,
                        "answers": list(dict.fromkeys(answers))})
    return records


def write_jsonl_gz(records: list[dict], path: Path) -> None:
    """One JSON record a line, gzipped without a timestamp, so that a rebuild gives the same bytes."""
    data = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    path.write_bytes(gzip.compress(data.encode("utf-8"), mtime=0))


def main(argv: Sequence[str]) -> int:
    """Rebuilds the checkout's resources/doc_suite/ files from git snapshots of ILCoWE and of the SQuAD explorer
    (argv: their two git directories); 2 with a usage line when they are not given."""
    if len(argv) != 2:
        print("usage: python -m specchat.bench.doc_suite ILCOWE_GIT_DIR SQUAD_EXPLORER_GIT_DIR", file=sys.stderr)
        return 2
    from tokenizers import Tokenizer

    from ..resources import resource

    tokenizer = Tokenizer.from_str(resource("models", "smollm2-draft", "tokenizer.json").read_text(encoding="utf-8"))
    out = Path(__file__).resolve().parents[2] / "resources" / "doc_suite"
    texts = ilcowe_texts(Path(argv[0]))
    documents = squad_documents(Path(argv[1]), lambda text: len(tokenizer.encode(text).ids))
    for name, records in ((PROOFREAD_FILE, texts), (DOCUMENT_QA_FILE, documents)):
        write_jsonl_gz(records, out / name)
        print(f"{out / name}: {len(records)} records, {(out / name).stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
