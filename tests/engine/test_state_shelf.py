"""Per-chat llama.cpp states (engine/backends/llamacpp/state_shelf.py): the shelf's two tiers on real files (LRU
under small caps, damaged, truncated and foreign files, concurrent and interrupted writers), and on the real embedded
GGUF file a chat read again after another chat, or after a restart, from its kept state, bit for bit as a fresh
runner reads it."""

import ctypes
import os
import threading
import time

import numpy as np
import pytest
import torch
from runner_reads import read_then_decode

from specchat.core.one_time import Interrupted
from specchat.engine.backends.llamacpp import llama_runner, prompt_reader, state_shelf
from specchat.engine.backends.llamacpp.prompt_reader import common_prefix
from specchat.engine.backends.llamacpp.state_files import (HEADER, DamagedState, ShelvedState, read_state_file,
                                                           state_file_name, write_state_file)
from specchat.engine.backends.llamacpp.state_shelf import StateShelf

KEY, OTHER_KEY = "a" * 32, "b" * 32


def buffer(size: int, seed: int) -> ctypes.Array:
    """`size` bytes of a fake sequence state."""
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    return (ctypes.c_uint8 * size).from_buffer_copy(data)


def chat(seed: int, length: int = 600) -> list[int]:
    return [1000 * seed + i for i in range(length)]


def files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_the_state_sharing_the_longest_prefix_is_found_if_it_shares_enough(tmp_path):
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20)
    first, second = chat(1), chat(1)[:300] + chat(2)[300:]
    shelf.put(KEY, first, buffer(100, 1))
    shelf.put(KEY, second, buffer(100, 2))
    asked = chat(1)[:400] + [7] * 50
    assert shelf.lookup(KEY, asked).tokens == tuple(first)
    assert shelf.lookup(KEY, chat(1)[:40] + [7] * 500) is None  # fewer than MIN_SHARED tokens in common
    assert shelf.lookup(KEY, asked, at_least=401) is None
    assert shelf.lookup(KEY, asked, max_held=599) is None  # both hold more than such a reader's context
    assert shelf.lookup(OTHER_KEY, asked) is None


def test_a_chats_longer_state_replaces_its_shorter_one_in_both_tiers(tmp_path):
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20)
    shelf.put(KEY, chat(1, 600), buffer(100, 1))
    shelf.put(KEY, chat(1, 900), buffer(150, 2))  # the next turn of the same chat
    assert files(tmp_path) == [state_file_name(KEY, chat(1, 900))]
    assert shelf.memory_used == 150
    shelf.put(KEY, chat(1, 700), buffer(120, 3))  # an earlier turn again: the longer state already serves it
    assert shelf.memory_used == 150 and len(files(tmp_path)) == 1


def test_the_memory_tier_drops_the_least_recently_used_state(tmp_path):
    shelf = StateShelf(None, memory_bytes=2500)
    for seed in (1, 2):
        shelf.put(KEY, chat(seed), buffer(1000, seed))
    assert shelf.lookup(KEY, chat(1)) is not None  # chat 1 is now the most recently used
    shelf.put(KEY, chat(3), buffer(1000, 3))
    assert shelf.lookup(KEY, chat(2)) is None
    assert shelf.lookup(KEY, chat(1)) is not None and shelf.lookup(KEY, chat(3)) is not None
    shelf.put(KEY, chat(4), buffer(3000, 4))  # larger than the whole tier: not kept, nothing dropped for it
    assert shelf.lookup(KEY, chat(4)) is None and shelf.memory_used == 2000


def test_the_disk_tier_drops_the_least_recently_used_file_and_a_restart_reads_the_rest(tmp_path):
    size = 1000
    file_size = HEADER.size + 4 * 600 + size + 32
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20, disk_bytes=2 * file_size + 10)
    states = {seed: buffer(size, seed) for seed in (1, 2, 3)}
    for seed in (1, 2):
        shelf.put(KEY, chat(seed), states[seed])
    old = time.time() - 100
    for seed in (1, 2):  # chat 1 written first
        os.utime(tmp_path / state_file_name(KEY, chat(seed)), (old + seed, old + seed))
    restarted = StateShelf(tmp_path, memory_bytes=1 << 20, disk_bytes=2 * file_size + 10)
    found = restarted.lookup(KEY, chat(1))  # read from disk: its file is now the most recently used
    assert found is not None and bytes(found.state) == bytes(states[1]) and restarted.memory_used == size
    restarted.put(KEY, chat(3), states[3])
    assert files(tmp_path) == sorted(state_file_name(KEY, chat(seed)) for seed in (1, 3))
    assert StateShelf(tmp_path).lookup(KEY, chat(2)) is None


def test_a_state_larger_than_the_disk_cap_is_kept_in_memory_only_and_evicts_no_file(tmp_path):
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20, disk_bytes=4000)
    shelf.put(KEY, chat(1), buffer(1000, 1))
    shelf.put(KEY, chat(2), buffer(5000, 2))
    assert files(tmp_path) == [state_file_name(KEY, chat(1))]
    assert shelf.lookup(KEY, chat(2)) is not None


def test_a_refused_state_is_discarded_and_a_closed_models_states_leave_memory(tmp_path):
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20)
    shelf.put(KEY, chat(1), buffer(1000, 1))
    shelf.put(OTHER_KEY, chat(2), buffer(1000, 2))
    shelf.discard(shelf.lookup(KEY, chat(1)))
    assert shelf.lookup(KEY, chat(1)) is None and files(tmp_path) == [state_file_name(OTHER_KEY, chat(2))]
    shelf.forget_key(OTHER_KEY)
    assert shelf.memory_used == 0
    assert shelf.lookup(OTHER_KEY, chat(2)) is not None  # from its file


def damage(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "a flipped state byte":
        data[-100] ^= 1
    elif how == "truncated":
        data = data[:-1]
    elif how == "a token count out of bounds":
        data[44:48] = (1 << 30).to_bytes(4, "little")
    elif how == "another token":
        data[HEADER.size] ^= 1
    elif how == "not a state file":
        data[:8] = b"GGUFGGUF"
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["a flipped state byte", "truncated", "a token count out of bounds",
                                 "another token", "not a state file"])
def test_a_damaged_or_truncated_file_is_ignored_and_deleted(tmp_path, how):
    StateShelf(tmp_path).put(KEY, chat(1), buffer(5000, 1))
    path = tmp_path / state_file_name(KEY, chat(1))
    damage(path, how)
    assert StateShelf(tmp_path).lookup(KEY, chat(1)) is None
    assert not path.exists()


def test_a_state_of_another_model_build_or_setting_is_never_used(tmp_path):
    StateShelf(tmp_path).put(KEY, chat(1), buffer(5000, 1))
    assert StateShelf(tmp_path).lookup(OTHER_KEY, chat(1)) is None
    assert files(tmp_path) == [state_file_name(KEY, chat(1))]  # another model's, kept for it
    (tmp_path / state_file_name(KEY, chat(1))).rename(tmp_path / state_file_name(OTHER_KEY, chat(1)))
    assert StateShelf(tmp_path).lookup(OTHER_KEY, chat(1)) is None  # named for this key, written for another
    assert files(tmp_path) == []
    StateShelf(tmp_path).put(KEY, chat(2), buffer(50, 2))
    with pytest.raises(DamagedState, match="another model"):
        read_state_file(tmp_path / state_file_name(KEY, chat(2)), OTHER_KEY, 1 << 20)


def test_concurrent_writers_never_leave_a_partial_file(tmp_path):
    entries = [ShelvedState(KEY, tuple(chat(seed % 3)), buffer(3 << 20, seed % 3)) for seed in range(12)]
    path_of = {entry.name: tmp_path / entry.name for entry in entries}
    seen, stop, problems = [], threading.Event(), []

    def watch() -> None:  # every file that is there at all is whole
        while not stop.is_set():
            for path in path_of.values():
                try:
                    seen.append(len(read_state_file(path, KEY, 1 << 30).tokens))
                except FileNotFoundError:
                    pass
                except DamagedState as error:
                    problems.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    writers = [threading.Thread(target=write_state_file, args=(path_of[e.name], e)) for e in entries]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    stop.set()
    watcher.join()
    assert not problems and seen
    assert files(tmp_path) == sorted(path_of)  # three files, no staging file left
    for entry in entries[:3]:
        assert bytes(read_state_file(path_of[entry.name], KEY, 1 << 30).state) == bytes(entry.state)


def test_an_interrupted_write_leaves_nothing_and_a_later_one_succeeds(tmp_path):
    shelf = StateShelf(tmp_path, memory_bytes=64 << 20)
    owed = {}
    shelf.put(KEY, chat(1), buffer(20 << 20, 1), defer=lambda name, task: owed.setdefault(name, task))
    assert files(tmp_path) == []  # nothing written before the model is idle
    calls = []

    def reply_started() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise Interrupted

    (task,) = owed.values()
    with pytest.raises(Interrupted):
        task(reply_started)
    assert files(tmp_path) == []
    task(lambda: None)
    assert files(tmp_path) == [state_file_name(KEY, chat(1))]


def test_a_write_owed_by_a_running_measurement_runs_after_it_without_hanging(tmp_path, monkeypatch):
    """A measurement's passes may read a long prompt, whose state is then owed to the same OneTimeWork: with
    SPECCHAT_MEASURE_NOW=1 (the tests) it runs after the measurement, in the same settle."""
    from specchat.core.one_time import OneTimeWork

    monkeypatch.setenv("SPECCHAT_MEASURE_NOW", "1")
    work, shelf, order = OneTimeWork(), StateShelf(tmp_path), []

    def measurement(check) -> None:
        shelf.put(KEY, chat(1), buffer(100, 1), defer=work.owe)
        order.append("measured")

    settled = threading.Thread(target=work.owe, args=("cost curve", measurement), daemon=True)
    settled.start()
    settled.join(timeout=30)
    assert not settled.is_alive() and order == ["measured"] and work.owed() == []
    assert files(tmp_path) == [state_file_name(KEY, chat(1))]


def test_a_staging_file_left_by_a_dead_writer_is_swept(tmp_path):
    left = tmp_path / f".{state_file_name(KEY, chat(1))}.x1.tmp"
    left.write_bytes(b"half")
    os.utime(left, (time.time() - 2 * state_shelf.STALE_TEMP_S,) * 2)
    StateShelf(tmp_path).put(KEY, chat(2), buffer(100, 2))
    assert files(tmp_path) == [state_file_name(KEY, chat(2))]


def test_the_caps_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(state_shelf.MEMORY_ENV, "0")
    assert state_shelf.default_shelf() is None
    monkeypatch.setenv(state_shelf.MEMORY_ENV, "lots")
    monkeypatch.setenv(state_shelf.DISK_ENV, "0")
    shelf = state_shelf.default_shelf()
    assert shelf.memory_bytes == state_shelf.DEFAULT_MEMORY_MIB << 20 and shelf.folder is None


# --- on the real model ------------------------------------------------------------------------------------------------

TOPICS = ["maps", "poetry", "chemistry", "music", "gardening", "law", "ships", "weaving", "clocks", "bridges"]


def document(seed: int, sentences: int = 12) -> str:
    return " ".join(f"Room {seed * 100 + i} of the library keeps books on {TOPICS[(seed + i) % 10]} and opens at "
                    f"{(i * 7 + seed) % 12 + 1} o'clock." for i in range(sentences))


def ids(pair, *turns: str) -> list[int]:
    from specchat.engine.chat_prompt import Message, build_prompt_ids

    roles = ["user", "assistant"] * len(turns)
    return build_prompt_ids(pair.target.tokenizer, [Message(r, t) for r, t in zip(roles, turns)])


@pytest.fixture
def fresh_shelves(monkeypatch, tmp_path):
    """The process's shelves over an empty cache folder, readers reading in chunks of 64 and keeping prompts of 128
    tokens (short documents then cover several chunks: seconds, not minutes, on two busy cores); returns a function
    that forgets the shelves (a restart)."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(state_shelf.MEMORY_ENV, "256")  # on, whatever the test run's defaults (tests/conftest.py)
    monkeypatch.setenv(state_shelf.DISK_ENV, "256")
    monkeypatch.setattr(state_shelf, "_shelves", {})
    monkeypatch.setattr(prompt_reader, "CHUNK", 64)
    monkeypatch.setattr(state_shelf, "MIN_SHELVED", 128)
    return lambda: state_shelf._shelves.clear()


def fresh_reply(native, tokens: list[int], monkeypatch) -> tuple[torch.Tensor, list[int]]:
    """What a fresh runner with no shelf replies."""
    with monkeypatch.context() as patch:
        patch.setenv(state_shelf.MEMORY_ENV, "0")
        runner = native.runner()
        reply = read_then_decode(runner, tokens)
        assert runner.reused_tokens == 0
    return reply


def chats_a_b_then_a(pair, runner) -> tuple[list[int], list[int]]:
    """Reads chat A's first turn, then chat B's; returns chat A's first prompt and its follow-up (the first turn's
    reply in it)."""
    first = ids(pair, document(1) + " Which room keeps books on maps?")
    _, reply = read_then_decode(runner, first)
    read_then_decode(runner, ids(pair, document(2) + " Which room keeps books on ships?"))
    text = pair.target.tokenizer.decode(reply, skip_special_tokens=True)
    return first, ids(pair, document(1) + " Which room keeps books on maps?", text, "And when does it open?")


@pytest.mark.model
def test_chat_a_after_chat_b_is_restored_from_the_shelf_bit_for_bit(native_pair, fresh_shelves, monkeypatch):
    native = native_pair.target.native
    runner = native.runner()
    first, follow_up = chats_a_b_then_a(native_pair, runner)
    restored = read_then_decode(runner, follow_up)
    shared = common_prefix(first[:-1], follow_up, len(follow_up) - 1)
    whole = prompt_reader.whole_passes(follow_up, shared, native.turn_end_ids)  # up to the first turn's question
    assert runner.restored_tokens == runner.reused_tokens == whole > 0
    fresh = fresh_reply(native, follow_up, monkeypatch)
    assert torch.equal(restored[0], fresh[0]) and restored[1] == fresh[1]


@pytest.mark.model
def test_after_a_restart_chat_a_is_read_from_disk_bit_for_bit(native_pair, fresh_shelves, monkeypatch):
    native = native_pair.target.native
    _, follow_up = chats_a_b_then_a(native_pair, native.runner())
    fresh_shelves()  # a new process: its memory tier is empty, its disk tier the same folder
    runner = native.runner()
    restored = read_then_decode(runner, follow_up)
    assert runner.restored_tokens >= prompt_reader.CHUNK
    assert state_shelf.default_shelf().memory_used > 0  # the file read, and kept in memory from then on
    fresh = fresh_reply(native, follow_up, monkeypatch)
    assert torch.equal(restored[0], fresh[0]) and restored[1] == fresh[1]


@pytest.mark.model
def test_a_reply_says_how_much_of_its_prompt_came_from_the_shelf(native_pair, fresh_shelves):
    from specchat.engine.decoding.speculative import GenerationConfig

    engine = native_pair.engine("none")
    config = GenerationConfig(max_new_tokens=4)
    engine.generate(ids(native_pair, document(3) + " Which room keeps books on law?"), config)
    engine.generate(ids(native_pair, document(4) + " Which room keeps books on law?"), config)
    again = engine.generate(ids(native_pair, document(3) + " Which room opens at one o'clock?"), config).stats
    assert again.prompt_restored == again.prompt_reused >= prompt_reader.CHUNK
    assert again.to_dict()["prompt_restored"] == again.prompt_restored


def test_passes_end_with_each_turn_so_a_continued_read_cuts_as_a_fresh_one(monkeypatch):
    monkeypatch.setattr(prompt_reader, "CHUNK", 4)
    ends = frozenset({9})  # the turn-ending token
    tokens = [1, 2, 9, 3, 4, 5, 6, 7, 8, 9, 5]
    cuts = [0]
    while cuts[-1] < len(tokens):
        cuts.append(prompt_reader.pass_end(tokens, cuts[-1], ends))
    assert cuts == [0, 3, 7, 10, 14]  # after each turn's end, and CHUNK positions into a turn
    assert prompt_reader.whole_passes(tokens, 9, ends) == 7  # the pass 7-10 is not whole within 9 positions
    assert prompt_reader.whole_passes(tokens, 10, ends) == 10
    assert prompt_reader.whole_passes(tokens[:10] + [4, 4, 4, 4, 4], 12, ends) == 10  # the next turn's pass is cut
    assert prompt_reader.whole_passes([9, 9], 2, ends) == 2


def a_turn_that_ends(pair) -> tuple[str, object]:
    """A question about a document whose greedy reply ends its turn (EOS) within 48 tokens, and that reply."""
    from specchat.core.vocabulary import EOS
    from specchat.engine.decoding.speculative import GenerationConfig

    question = document(5) + " Which room keeps books on music? Answer with the room's number only."
    first = pair.engine("none").generate(ids(pair, question), GenerationConfig(max_new_tokens=48))
    assert first.finish_reason == EOS and len(ids(pair, question)) >= state_shelf.MIN_SHELVED
    return question, first


@pytest.mark.model
def test_a_follow_up_reads_only_its_new_message_once_the_reply_is_read_ahead(native_pair, fresh_shelves,
                                                                             monkeypatch):
    """The reply's turn is read in the model's idle time (here at once: SPECCHAT_MEASURE_NOW=1), so the follow-up,
    on the same engine, in another runner (after another chat) and after a restart (from disk), reads only its new
    message, and gives bit for bit what a fresh read gives."""
    from specchat.engine.decoding.speculative import GenerationConfig

    native = native_pair.target.native
    question, first = a_turn_that_ends(native_pair)
    follow_up = ids(native_pair, question, first.text, "And when does it open?")
    read_ahead = ids(native_pair, question) + list(first.token_ids)  # the prompt, the reply and its <|im_end|>
    assert follow_up[:len(read_ahead)] == read_ahead
    again = native_pair.engine("none").generate(follow_up, GenerationConfig(max_new_tokens=8))
    assert again.stats.prompt_reused == len(read_ahead)
    fresh = fresh_reply(native, follow_up, monkeypatch)
    assert list(again.token_ids) == fresh[1]
    for restart in (False, True):
        if restart:
            fresh_shelves()  # a new process: the same folder, an empty memory tier
        runner = native.runner()
        restored = read_then_decode(runner, follow_up)
        assert runner.restored_tokens >= len(read_ahead)  # the follow-up's own state, kept too, holds more
        assert torch.equal(restored[0], fresh[0]) and restored[1] == fresh[1]


@pytest.mark.model
def test_a_reply_that_starts_stops_a_read_ahead_and_the_newest_one_is_owed(native_pair, fresh_shelves, monkeypatch):
    from specchat.core import one_time

    monkeypatch.setenv(one_time.MEASURE_NOW_ENV, "0")  # owed, not run: the test runs it
    # and no idle spell runs it first: on a loaded machine the background worker had read it all before the test
    # called it (so no pass was left to interrupt)
    monkeypatch.setattr(one_time, "IDLE_S", 1e9)
    native, tokenizer = native_pair.target.native, native_pair.target.tokenizer
    runner = native.runner()
    prompt = ids(native_pair, document(6) + " Which room keeps books on law?")
    read_then_decode(runner, prompt)
    reply = tokenizer(document(7), add_special_tokens=False)["input_ids"][:150] + [native.eos_token_id]
    runner.read_ahead(prompt + reply[:40])
    runner.read_ahead(prompt + reply)  # the newest turn replaces the one still owed
    task = native.one_time._pending[state_shelf.READ_AHEAD]
    checks = []

    def a_reply_starts_after_the_first_pass() -> None:
        checks.append(1)
        raise Interrupted

    with pytest.raises(Interrupted):
        task(a_reply_starts_after_the_first_pass)
    assert checks == [1] and state_shelf.READ_AHEAD in native.one_time.owed()
    task(lambda: None)  # the next idle spell: it goes on from the passes it read
    follow_up = prompt + reply + tokenizer("\n<|im_start|>user\nAnd when?<|im_end|>\n<|im_start|>assistant\n",
                                           add_special_tokens=False)["input_ids"]
    other = native.runner()
    restored = read_then_decode(other, follow_up)
    assert other.restored_tokens == len(prompt) + len(reply)
    fresh = fresh_reply(native, follow_up, monkeypatch)
    assert torch.equal(restored[0], fresh[0]) and restored[1] == fresh[1]
    native.one_time.drop(state_shelf.READ_AHEAD)
    assert state_shelf.READ_AHEAD not in native.one_time.owed()


def test_a_restart_preloads_the_latest_states_that_fit_and_stops_when_a_reply_starts(tmp_path):
    """After a restart the idle time loads the most recently used files into memory (StateShelf.preload), the
    newest first, within its budget; a reply's start stops it between blocks, and it goes on later."""
    size = 3000
    shelf = StateShelf(tmp_path, memory_bytes=1 << 20)
    states = {seed: buffer(size, seed) for seed in (1, 2, 3)}
    for seed in (1, 2, 3):
        shelf.put(KEY, chat(seed), states[seed])
    old = time.time() - 100
    for seed in (1, 2, 3):  # chat 3 used last, then 2
        os.utime(tmp_path / state_file_name(KEY, chat(seed)), (old + seed, old + seed))
    budget = 2 * (HEADER.size + 4 * 600 + size + 32)  # two files' worth

    restarted = StateShelf(tmp_path, memory_bytes=1 << 20)

    def reply_started() -> None:
        raise Interrupted

    with pytest.raises(Interrupted):
        restarted.preload(KEY, budget, reply_started)
    assert restarted.memory_used == 0
    assert restarted.preload(KEY, budget) == 2 and restarted.memory_used == 2 * size
    mtimes = {seed: os.stat(tmp_path / state_file_name(KEY, chat(seed))).st_mtime for seed in (1, 2, 3)}
    assert mtimes == {seed: old + seed for seed in (1, 2, 3)}  # a preload uses nothing: no file marked as used
    os.unlink(tmp_path / state_file_name(KEY, chat(3)))  # memory serves it still, without its file
    found = restarted.lookup(KEY, chat(3))
    assert found is not None and bytes(found.state) == bytes(states[3])
    assert restarted.latest(KEY).tokens == tuple(chat(3)) and restarted.latest(OTHER_KEY) is None
    assert restarted.preload(KEY, budget) == 0  # nothing more fits
    restarted.memory_bytes = 3 * size  # a full memory drops the older preloaded state first, not the newest
    restarted.put(KEY, chat(4, 700), buffer(size, 4))
    restarted.put(KEY, chat(5, 800), buffer(size, 5))
    os.unlink(tmp_path / state_file_name(KEY, chat(2)))
    assert restarted.lookup(KEY, chat(3)) is not None and restarted.lookup(KEY, chat(2)) is None
    assert restarted.latest(KEY).tokens == tuple(chat(3))  # the lookup just used chat 3's
    assert StateShelf(tmp_path).preload(OTHER_KEY, budget) == 0


@pytest.mark.model
def test_a_chat_continued_after_a_restart_finds_its_contexts_made_ahead(native_pair, fresh_shelves, monkeypatch):
    """After a restart, the idle time after a first short turn makes the decoding context and the reader that the
    latest kept chat's next turn needs (room_ahead.py); that chat's follow-up then takes them rather than making its
    own on its first token's path, and gives bit for bit what a fresh read gives."""
    monkeypatch.setattr(llama_runner, "CONTEXT_STEP", 256)  # the short documents here outgrow a first context
    native = native_pair.target.native
    question, first = a_turn_that_ends(native_pair)
    follow_up = ids(native_pair, question, first.text, "And when does it open?")
    fresh_shelves()  # a new process: the same folder, an empty memory tier
    native.room(keeps_features=False).free()  # and no contexts made ahead
    state_shelf.owe_preload(native)  # as a load owes it (run at once here: SPECCHAT_MEASURE_NOW=1)
    runner = native.runner()
    hello = ids(native_pair, "Hello!")
    read_then_decode(runner, hello)  # its first context owes the room (made at once here, after the preload)
    assert runner._room.n_ctx >= len(follow_up) + llama_runner.NEXT_MESSAGE > runner._n_ctx == 256
    made_here = []
    with monkeypatch.context() as patch:
        patch.setattr(llama_runner, "new_decoding_context", lambda *args: made_here.append(args))
        restored = read_then_decode(runner, follow_up)
    assert made_here == [] and runner._room.n_ctx == 0 and runner.restored_tokens > 0
    fresh = fresh_reply(native, follow_up, monkeypatch)
    assert torch.equal(restored[0], fresh[0]) and restored[1] == fresh[1]



def test_the_room_made_ahead_serves_the_largest_need_of_the_models_runners(native_pair, fresh_shelves, monkeypatch):
    """Two runners of one model (a chat's and a race lane's) owe their next turns while a reply runs: the one task
    the model runs when idle makes room for the larger need, not for the need said last."""
    monkeypatch.setattr(llama_runner, "CONTEXT_STEP", 256)
    monkeypatch.setenv("SPECCHAT_MEASURE_NOW", "0")  # owed tasks wait for the idle time, as in the app
    native = native_pair.target.native
    room = native.room(keeps_features=False)
    room.free()
    chat, lane = native.runner(), native.runner()
    with native.one_time.reply():  # a reply runs: both needs are owed before either is made
        chat.new_cache(64)
        lane.new_cache(64)
        chat.owe_room(1000)
        lane.owe_room(10)  # said last, and smaller
    native.one_time.settle()
    assert chat._n_ctx == lane._n_ctx == 256 and room.n_ctx >= 1000 + llama_runner.NEXT_MESSAGE
    del chat  # a runner gone needs nothing: the lane's own need is what is left
    room.free()
    lane.owe_room(10)
    native.one_time.settle()
    assert 0 < room.n_ctx < 1000
    room.free()
