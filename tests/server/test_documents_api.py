"""Documents sent to `specchat serve` (issue 45): OpenAI's file content parts, read and placed by the rule the window
and `specchat generate --attach` follow, and every bad file a 400 that names it.

The servers run in this process (RunningServer) on the tiny model of server_fixtures.py, whose tokenizer reads
bytes, so the prompt the engine read decodes back to its text exactly. Files are real: a text file, a PDF built in
PDF syntax (tests/documents/document_files.py), a DOCX written by python-docx; each is sent base64, plain or as a
data: URL, through the real `openai` client where a reply is expected and through httpx where an error is.

- A text file and a PDF are read whole into the prompt, each before the text of the message that carried it; the
  reply's `specchat` field names the sources (and the stream's last chunk does); a DOCX is read too.
- A long document in a small served context falls back to the passages that best match the question, labelled with
  their page, and the prompt and the reply fit the context.
- An oversized file, bad base64, a binary .txt, a damaged PDF, too many files, too many bytes in all, a file_id,
  a file in an assistant message, a file without a name, a read past its time: each a 400 JSON error whose param is
  the part and whose message names the file; the line is free afterwards.
- Documents are read off the event loop, inside the request's place in the line, and a client that leaves tells
  the reader to stop.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading

import docx
import httpx2 as httpx
import openai
import pytest
from documents.document_files import pdf_with_pages
from server_fixtures import wait_until

from specchat.documents.reading import document_from_bytes
from specchat.server.file_parts import DocumentLimits
from specchat.server.served import ServedModel

TIMEOUT = 120
NOTES = "The lighthouse keeper logs the tide at dawn.\nShips avoid the northern reef in winter.\n"
REPORT_PAGES = [["Quarterly report", "Revenue grew by nine percent."], ["Outlook", "Costs fall in spring."]]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=TIMEOUT)


def file_part(filename: str | None, data: bytes, data_url: str | None = None) -> dict:
    """A file content part: the bytes base64, or as a data: URL of media type `data_url`."""
    encoded = base64.b64encode(data).decode()
    file = {"file_data": f"data:{data_url};base64,{encoded}" if data_url else encoded}
    if filename is not None:
        file["filename"] = filename
    return {"type": "file", "file": file}


def ask(*parts: dict, text: str = "What do they say?", **options) -> dict:
    return {"model": "tiny", "max_tokens": 6,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}], **options}


def docx_bytes(paragraphs: list[str]) -> bytes:
    word = docx.Document()
    for paragraph in paragraphs:
        word.add_paragraph(paragraph)
    buffer = io.BytesIO()
    word.save(buffer)
    return buffer.getvalue()


@pytest.fixture
def prompts(monkeypatch, served_pair) -> list[str]:
    """The text of every prompt the server's engine reads (ServedModel.stream_ids runs as it is; its ids are
    decoded here with the model's tokenizer)."""
    seen: list[str] = []
    stream_ids = ServedModel.stream_ids

    def reading(self, prompt_ids, *args, **kwargs):
        seen.append(served_pair.target.tokenizer.decode(list(prompt_ids)))
        return stream_ids(self, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(ServedModel, "stream_ids", reading)
    return seen


# --- documents read -------------------------------------------------------------------------------------------

def test_a_text_file_and_a_pdf_are_read_whole_into_the_prompt(serve, prompts):
    server = serve()
    pdf = pdf_with_pages(REPORT_PAGES)
    reply = client(server.url).chat.completions.create(**ask(
        file_part("notes.txt", NOTES.encode()), file_part("report.pdf", pdf, data_url="application/pdf")))
    prompt = prompts[-1]
    notes, report = prompt.index('<document name="notes.txt">'), prompt.index('<document name="report.pdf">')
    assert notes < report < prompt.index("What do they say?")  # before the text of the message that carried them
    assert NOTES.strip() in prompt and "Revenue grew by nine percent." in prompt and "Costs fall in spring." in prompt
    figures = reply.model_extra["specchat"]
    assert figures["documents"] == [{"name": "notes.txt", "kind": "text", "pages": None, "read": "whole"},
                                    {"name": "report.pdf", "kind": "pdf", "pages": 2, "read": "whole"}]
    assert [source["label"] for source in figures["sources"]] == ["notes.txt", "report.pdf"]
    assert figures["left_out_messages"] == 0 and len(figures["origins"]) == 6  # the reply's own figures stay
    assert reply.usage.prompt_tokens == len(server.served.pair.target.tokenizer(prompt)["input_ids"])


def test_each_document_goes_with_its_message_and_the_stream_ends_with_the_sources(serve, prompts):
    server = serve()
    memo = docx_bytes(["Minutes of the garden committee.", "The roses are pruned in March."])
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": [file_part("memo.docx", memo), {"type": "text", "text": "Read this."}]},
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "When are the roses pruned?"}]
    chunks = list(client(server.url).chat.completions.create(model="tiny", messages=messages, max_tokens=6,
                                                            stream=True))
    prompt = prompts[-1]
    assert (prompt.index('<document name="memo.docx">') < prompt.index("The roses are pruned in March.")
            < prompt.index("Read this.") < prompt.index("Done.") < prompt.index("When are the roses pruned?"))
    last = chunks[-1]
    assert last.choices[0].finish_reason == "length"
    assert last.model_extra["specchat"]["sources"] == [{"name": "memo.docx", "page": None, "passage": None,
                                                        "label": "memo.docx"}]
    assert all("sources" not in (c.model_extra or {}).get("specchat", {}) for c in chunks[:-1])


def test_a_long_document_in_a_small_context_is_read_as_its_best_passages(serve, prompts):
    server = serve(context_size=2048)
    pages = [[f"Section {page}: the committee reviewed routine matters of budget item {page}."] * 8
             for page in range(1, 13)]
    pages[8] = ["The zebra herds migrate north across the Serengeti plains in July."]
    survey = pdf_with_pages(pages)
    answer = httpx.post(f"{server.url}/v1/chat/completions", timeout=TIMEOUT, json=ask(
        file_part("survey.pdf", survey), text="Where do the zebra herds migrate?", max_tokens=32))
    assert answer.status_code == 200, answer.text
    prompt, figures = prompts[-1], answer.json()["specchat"]
    assert figures["documents"] == [{"name": "survey.pdf", "kind": "pdf", "pages": 12, "read": "passages"}]
    assert "Passages from the attached documents" in prompt and "<document name=" not in prompt
    zebra = next(p for p in document_from_bytes("survey.pdf", survey).passages if "zebra" in p.text)
    label = f"survey.pdf, p. {zebra.page}"  # the page the matching passage starts on, as the reader says
    assert f'<passage source="{label}">\n{zebra.text}\n</passage>' in prompt
    assert prompt.index("</passage>") < prompt.index("Where do the zebra herds migrate?")
    assert {"name": "survey.pdf", "page": zebra.page, "passage": zebra.position, "label": label} in figures["sources"]
    assert "Section 1: the committee" not in prompt  # the first page is not the question's: left out
    usage = answer.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 2048


# --- bad files ------------------------------------------------------------------------------------------------

PNG_AS_TEXT = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8


@pytest.mark.parametrize("body, param, words", [
    (ask(file_part("huge.txt", b"word " * 500_000)), "messages.0.content.1",
     ["huge.txt is 2.5 MB", "at most 2.0 MB from one file"]),
    (ask({"type": "file", "file": {"filename": "notes.txt", "file_data": "bm90IGJhc2U2NA=?"}}),
     "messages.0.content.1", ["notes.txt", "not valid base64"]),
    (ask({"type": "file", "file": {"filename": "notes.txt", "file_data": "data:text/plain,hello"}}),
     "messages.0.content.1", ["data: URL", "base64"]),
    (ask(file_part("picture.txt", PNG_AS_TEXT)), "messages.0.content.1", ["picture.txt"]),
    (ask(file_part("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF")),
     "messages.0.content.1", ["broken.pdf"]),
    (ask(file_part("slides.pptx", b"PK\x03\x04")), "messages.0.content.1", ["slides.pptx", ".pptx"]),
    (ask(file_part(None, NOTES.encode())), "messages.0.content.1", ["no name", "filename"]),
    (ask(*[file_part(f"n{i}.txt", NOTES.encode()) for i in range(9)]), "messages", ["9 files", "at most 8"]),
    (ask({"type": "file", "file": {"file_id": "file-abc123"}}), "messages.0.content.1", ["file_id", "file_data"]),
    ({"model": "tiny", "messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": [file_part("a.txt", b"a")]},
                                    {"role": "user", "content": "and?"}]}, "messages.1.content.0", ["user messages"]),
])
def test_a_bad_file_gets_a_400_that_names_it(serve, body, param, words):
    server = serve()
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert all(word in error["message"] for word in words), error["message"]
    assert "Traceback" not in error["message"] and "\n" not in error["message"]
    with pytest.raises(openai.BadRequestError) as raised:  # and the client raises it with the message
        client(server.url).chat.completions.create(**body)
    assert error["message"] in str(raised.value)
    assert server.line.load() == (0, 0)


def test_the_bytes_of_all_files_and_their_reading_time_are_bounded(serve):
    server = serve()
    two = ask(file_part("a.txt", NOTES.encode() * 200), file_part("b.txt", NOTES.encode() * 200))
    server.served.document_limits = DocumentLimits(max_total_bytes=30_000)
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=two, timeout=TIMEOUT)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "files_too_large", answer.text
    assert "kB; this server reads at most 30 kB of files" in answer.json()["error"]["message"]
    server.served.document_limits = DocumentLimits(max_total_chars=25_000)
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=two, timeout=TIMEOUT)
    assert answer.status_code == 400 and "b.txt" in answer.json()["error"]["message"], answer.text
    server.served.document_limits = DocumentLimits(max_seconds=1e-9)
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=two, timeout=TIMEOUT)
    assert answer.status_code == 400 and "a.txt took longer than" in answer.json()["error"]["message"], answer.text
    server.served.document_limits = DocumentLimits()
    assert httpx.post(f"{server.url}/v1/chat/completions", json=two, timeout=TIMEOUT).status_code == 200


def test_documents_are_read_off_the_event_loop(serve, monkeypatch):
    server = serve()
    started, release = threading.Event(), threading.Event()
    read_documents = ServedModel.read_documents

    def slow_read(self, request, cancel=None):
        started.set()
        release.wait(20)
        return read_documents(self, request, cancel)

    monkeypatch.setattr(ServedModel, "read_documents", slow_read)
    outcome = {}
    threading.Thread(target=lambda: outcome.update(answer=httpx.post(
        f"{server.url}/v1/chat/completions", json=ask(file_part("notes.txt", NOTES.encode())), timeout=TIMEOUT)),
        daemon=True).start()
    assert started.wait(20)
    assert httpx.get(f"{server.url}/health", timeout=5).json()["waiting"] == 1  # it holds its place meanwhile
    release.set()
    wait_until(lambda: "answer" in outcome, TIMEOUT)
    assert outcome["answer"].status_code == 200


def test_a_client_that_leaves_stops_the_reading_of_its_documents(serve, monkeypatch):
    server = serve()
    heard: list[threading.Event] = []
    read_documents = ServedModel.read_documents

    def reading_until_told(self, request, cancel=None):
        heard.append(cancel)
        cancel.wait(TIMEOUT)  # as a long PDF's pages would, between each
        return read_documents(self, request, cancel)

    monkeypatch.setattr(ServedModel, "read_documents", reading_until_told)
    data = json.dumps(ask(file_part("notes.txt", NOTES.encode()))).encode()
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    wait_until(lambda: heard, TIMEOUT)
    assert not heard[0].is_set() and server.line.load() == (0, 1)
    connection.close()
    wait_until(lambda: heard[0].is_set(), TIMEOUT)  # the reader is told to stop
    wait_until(lambda: server.line.load() == (0, 0), TIMEOUT)  # and the place is given back
