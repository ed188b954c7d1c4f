"""The room made ahead (engine/backends/llamacpp/room_ahead.py): a context and a reader made once for the largest
size asked, handed over once, freed when too small or with their runner, and made in two steps a reply can
interrupt."""

import pytest

from specchat.core.one_time import Interrupted
from specchat.engine.backends.llamacpp.room_ahead import RoomAhead


class Reader:
    def __init__(self, n_ctx: int):
        self.n_ctx, self.closed, self.reserved = n_ctx, False, 0

    def reserve(self, size: int) -> None:
        self.reserved = size

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def made():
    """The room over fake llama.cpp calls, with the lists of what it made and freed."""
    contexts, freed, readers = [], [], []

    def make_context(n_ctx: int) -> str:
        contexts.append(f"ctx{len(contexts)}:{n_ctx}")
        return contexts[-1]

    def make_reader(n_ctx: int) -> Reader:
        readers.append(Reader(n_ctx))
        return readers[-1]

    return RoomAhead(make_context, freed.append, make_reader), contexts, freed, readers


def test_a_room_is_made_once_for_its_size_and_handed_over_once(made):
    room, contexts, freed, readers = made
    room.make(2048, lambda: None, with_reader=True, state_bytes=5000)
    room.make(2048, lambda: None, with_reader=True)  # as large: nothing made again
    room.make(1024, lambda: None, with_reader=True)  # smaller: kept as it is
    assert contexts == ["ctx0:2048"] and [(r.n_ctx, r.reserved) for r in readers] == [(2048, 5000)]
    ctx, n_ctx, reader = room.take(1500)
    assert (ctx, n_ctx, reader) == ("ctx0:2048", 2048, readers[0]) and not reader.closed
    assert room.take(1500) is None and room.n_ctx == 0 and freed == []


def test_a_larger_need_replaces_the_room_and_a_too_small_room_is_freed(made):
    room, contexts, freed, readers = made
    room.make(1024, lambda: None, with_reader=True)
    room.make(3072, lambda: None, with_reader=False)  # a runner that reads on its decoding context: no reader
    assert freed == ["ctx0:1024"] and readers[0].closed and room.n_ctx == 3072
    assert room.take(4096) is None  # the turn outgrew it: freed, the runner makes its own
    assert freed == ["ctx0:1024", "ctx1:3072"] and room.n_ctx == 0


def test_a_reply_between_the_context_and_the_reader_leaves_the_reader_for_later(made):
    room, contexts, freed, readers = made

    def a_reply_started() -> None:
        raise Interrupted

    with pytest.raises(Interrupted):
        room.make(2048, a_reply_started, with_reader=True)
    assert contexts == ["ctx0:2048"] and readers == []
    room.make(2048, lambda: None, with_reader=True)  # the next idle spell: only the reader is made
    assert contexts == ["ctx0:2048"] and [r.n_ctx for r in readers] == [2048]
    room.free()
    assert freed == ["ctx0:2048"] and readers[0].closed and room.take(1) is None
