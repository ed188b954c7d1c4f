"""Counting tokens from several threads at once (issue 45's review): the GUI thread's meter, the background thread's
document counts and the model thread's past replies share one tokenizer, which each uses under its one lock
(engine.chat_prompt.tokenizer_lock): the counts are those of one thread, and no two threads are ever inside the
tokenizer at once. The meter's DeferredCounts never calls the tokenizer for a document's text: it guesses and owes."""

import threading

from specchat.chats.context_plan import CHARS_PER_TOKEN_GUESS, DeferredCounts, TokenCounter
from specchat.engine.chat_prompt import encoded, reply_text_ids, tokenizer_lock


class Inside:
    """The real tokenizer, counting the threads inside a call to it at any moment (the most at once kept)."""

    def __init__(self, real):
        self.real = real
        self.now = self.most = 0
        self._guard = threading.Lock()

    def __call__(self, text, **options):
        with self._guard:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return self.real(text, **options)
        finally:
            with self._guard:
                self.now -= 1

    def __getattr__(self, name):
        return getattr(self.real, name)


def texts(count: int = 120) -> list[str]:
    return [f"Note {i}: " + " ".join(f"the shelf {j * i % 97} holds letters from {1900 + j}" for j in range(40 + i))
            for i in range(count)]


def test_two_threads_counting_at_once_count_as_one_thread_and_take_turns(tokenizer):
    inside = Inside(tokenizer)
    notes = texts()
    alone = [TokenCounter(tokenizer)(text) for text in notes]
    counts: dict[str, list] = {}
    start = threading.Barrier(3)

    def count(name: str) -> None:
        counter = TokenCounter(inside)  # a counter of its own: every text is counted, none remembered from another
        start.wait()
        counts[name] = [counter(text) for text in notes]

    def past_replies() -> None:  # the model thread's batches (ChatSession's past replies)
        start.wait()
        counts["batches"] = [len(ids) for chunk in range(0, len(notes), 8) for ids in encoded(inside,
                                                                                            notes[chunk:chunk + 8])]

    threads = [threading.Thread(target=count, args=(name,)) for name in ("meter", "background")]
    threads.append(threading.Thread(target=past_replies))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert counts["meter"] == counts["background"] == counts["batches"] == alone
    assert inside.most == 1  # never two threads inside the tokenizer at once


def test_a_reply_encoded_as_plain_text_waits_for_the_tokenizer(tokenizer):
    """reply_text_ids encodes on a copy of the tokenizer's backend, shared by the threads that share the tokenizer:
    under the same lock."""
    lock = tokenizer_lock(tokenizer)
    expected = reply_text_ids(tokenizer, "Go on <|im_end|> please")
    ids: list = []
    with lock:
        worker = threading.Thread(target=lambda: ids.append(reply_text_ids(tokenizer, "Go on <|im_end|> please")))
        worker.start()
        worker.join(0.3)
        assert worker.is_alive() and not ids  # waiting for the lock held here
    worker.join(30)
    assert ids == [expected] and tokenizer_lock(tokenizer) is lock


def test_deferred_counts_guess_a_document_and_owe_it_until_it_is_counted(tokenizer):
    inside = Inside(tokenizer)
    counter = TokenCounter(inside)
    document, turn = texts(1)[0] * 20, "How long are the loans?"
    deferred = DeferredCounts(counter)
    assert deferred.document(document) == -(-len(document) // CHARS_PER_TOKEN_GUESS)
    assert deferred(turn) == len(tokenizer(turn, add_special_tokens=False)["input_ids"])  # a turn: counted now
    assert deferred.owed == [document] and inside.most == 1
    counter(document)  # as the background thread does
    again = DeferredCounts(counter)
    assert again.document(document) == len(tokenizer(document, add_special_tokens=False)["input_ids"])
    assert again.owed == []


def test_deferred_counts_do_not_wait_for_a_tokenizer_another_thread_holds(tokenizer):
    counter = TokenCounter(tokenizer)
    deferred = DeferredCounts(counter)
    held, release = threading.Event(), threading.Event()

    def background() -> None:
        with tokenizer_lock(tokenizer):
            held.set()
            release.wait(30)

    worker = threading.Thread(target=background)
    worker.start()
    held.wait(30)
    try:
        assert deferred("A question typed meanwhile") == -(-len("A question typed meanwhile") // CHARS_PER_TOKEN_GUESS)
        assert deferred.owed == ["A question typed meanwhile"]
    finally:
        release.set()
        worker.join(30)
    assert DeferredCounts(counter)("A question typed meanwhile") == counter("A question typed meanwhile")
