"""Part of a chat's branch on screen, read without the rest of the chat: the messages at its end, the ones before a
given message, and which documents' messages lie on it (issue 46: a chat of 150,000 messages opens at its end, and
its older messages are read as the user scrolls up). No Qt.

chat_tree.py reads a chat's whole skeleton to walk it in memory; that costs a few hundred milliseconds for 150,000
messages here, too long for opening a chat or for a page of a scroll. These walks follow the parent links up from one
message instead (a recursive query over the primary key, bounded by the count wanted), so they cost what they read,
however long the chat. A message's `position` is its depth: the number of messages before it on its branch.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from sqlalchemy import Row, bindparam, func, literal, select
from sqlalchemy.orm import Session, aliased

from .tables import Conversation, GenerationRun, Message

CHUNK = 500  # ids in one IN (...) list, well under SQLite's limit on a statement's variables


def _path_up_query():
    """The walk up a branch: from :message_id, at most :count messages, none at a depth below :since."""
    parent = aliased(Message)
    up = (select(Message.id, Message.parent_id, Message.position, literal(1).label("step"))
          .where(Message.id == bindparam("message_id")).cte("up", recursive=True))
    up = up.union_all(select(parent.id, parent.parent_id, parent.position, up.c.step + 1)
                      .where(parent.id == up.c.parent_id, up.c.step < bindparam("count"),
                             up.c.position > bindparam("since")))
    return select(up.c.id).where(up.c.position >= bindparam("since")).order_by(up.c.step.desc())


# The statements, made once: made at each call, their expression objects were most of a page's garbage (a scroll
# through a long chat reads hundreds of pages, and the GUI thread collects that garbage).
_PATH_UP = _path_up_query()
_IDS = bindparam("ids", expanding=True)
_ROWS = select(Message.__table__).where(Message.__table__.c.id.in_(_IDS))
_CHILDREN = select(Message.id, Message.parent_id).where(Message.parent_id.in_(_IDS))
_FIRSTS = select(Message.id).where(Message.conversation_id == bindparam("chat"), Message.parent_id.is_(None))
_RUNS = select(GenerationRun.__table__).where(GenerationRun.__table__.c.message_id.in_(_IDS))


def shown_leaf_id(session: Session, conversation: Conversation) -> int | None:
    """The end of the branch on screen, as chat_tree.shown_leaf gives it, without the skeleton: `leaf_id` while it
    is one of the chat's messages, else the chat's newest message (None for an empty chat)."""
    leaf = conversation.leaf_id
    if leaf is not None and session.scalar(select(Message.id).where(Message.id == leaf,
                                                                    Message.conversation_id == conversation.id)):
        return leaf
    return session.scalar(select(func.max(Message.id)).where(Message.conversation_id == conversation.id))


def path_up(session: Session, message_id: int, count: int, since: int = 0) -> list[int]:
    """The ids of the last `count` messages of the branch ending at `message_id` (it included), and none at a depth
    below `since`: oldest first. One recursive query, which stops after `count` steps whatever the data holds."""
    if count <= 0:
        return []
    return list(session.scalars(_PATH_UP, {"message_id": message_id, "count": count, "since": since}))


def rows_with_siblings(session: Session, conversation_id: int, ids: Sequence[int]) -> list[tuple[Row, tuple[int, ...]]]:
    """The rows of the messages `ids` in that order (plain rows, with a Message's attributes: no ORM objects to
    make and collect, a page of a scroll being a few hundred of them), each with its siblings (the chat's messages
    sharing its parent, itself among them, oldest first)."""
    rows = {row.id: row for chunk in _chunks(ids) for row in session.execute(_ROWS, {"ids": chunk})}
    parents = {rows[i].parent_id for i in ids if i in rows}
    family: dict[int | None, list[int]] = {}
    known = [p for p in parents if p is not None]
    for chunk in _chunks(known):
        for child, parent in session.execute(_CHILDREN, {"ids": chunk}):
            family.setdefault(parent, []).append(child)
    if None in parents:
        family[None] = list(session.scalars(_FIRSTS, {"chat": conversation_id}))
    return [(rows[i], tuple(sorted(family.get(rows[i].parent_id, [i])))) for i in ids if i in rows]


def runs_of(session: Session, ids: Sequence[int]) -> list[Row]:
    """The rows of the generation runs of the messages `ids` (with a GenerationRun's attributes), oldest first."""
    runs = [run for chunk in _chunks(ids) for run in session.execute(_RUNS, {"ids": chunk})]
    return sorted(runs, key=lambda run: run.id)


def on_branch_above(session: Session, message_id: int, candidates: Iterable[int]) -> set[int]:
    """Which of the messages `candidates` lie on the branch above `message_id` (its ancestors): the walk up from it
    stops at the depth of the shallowest candidate, so it reads no more of the branch than it must."""
    wanted = set(candidates)
    if not wanted:
        return set()
    depth = min((d for chunk in _chunks(list(wanted))
                 for d in session.scalars(select(Message.position).where(Message.id.in_(chunk)))), default=None)
    start = session.get(Message, message_id)
    if depth is None or start is None or start.parent_id is None or depth >= start.position:
        return set()
    found = path_up(session, start.parent_id, start.position - depth, since=depth)
    return wanted.intersection(found)


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    ids = list(ids)
    for first in range(0, len(ids), CHUNK):
        yield ids[first:first + CHUNK]
