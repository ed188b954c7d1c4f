"""A chat's messages as a tree (0007): which branch is on screen, its path, its siblings, and forks.

Every message but a chat's first has a parent, the message it follows. An edited message and a regenerated reply are
siblings (they share a parent); nothing is deleted to make one. The chat shows one branch: the path from its first
message down to `conversations.leaf_id`. A leaf that is gone (deleted) or unset reads as the chat's newest message,
which is always a leaf: a message's children are written after it, so they have higher ids.

A chat's shape is read as its skeleton, {message id: parent id}, two integers a message: 150,000 messages read in
a few tens of milliseconds, and every walk (the path, the siblings, the newest leaf under a message) is then done in
memory, with no recursive query. No Qt.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from ..core.errors import StorageError
from .document_shelf import add_document, documents_of_messages
from .tables import Conversation, Message, utcnow

Skeleton = dict[int, "int | None"]  # message id -> parent id (None: a first message), in id order
FORK_PREFIX = "Branch: "  # a fork's title: the original's, after this (the sidebar cuts a title's end, not its start)


def skeleton(session: Session, conversation_id: int) -> Skeleton:
    """The chat's messages as {id: parent id}, oldest first."""
    return dict(session.execute(select(Message.id, Message.parent_id).where(Message.conversation_id ==
                                                                            conversation_id).order_by(Message.id)).all())


def shown_leaf(tree: Skeleton, leaf_id: int | None) -> int | None:
    """The end of the branch on screen: `leaf_id` when it is still in the chat, else its newest message (None for
    an empty chat)."""
    if leaf_id is not None and leaf_id in tree:
        return leaf_id
    return next(reversed(tree), None)


def path_to(tree: Skeleton, message_id: int | None) -> list[int]:
    """The ids from the chat's first message down to `message_id` ([] for None)."""
    path = []
    while message_id is not None:
        path.append(message_id)
        message_id = tree[message_id]
    path.reverse()
    return path


def subtree(tree: Skeleton, message_id: int) -> list[int]:
    """`message_id` and every message that follows it, oldest first (one pass: a child is newer than its parent)."""
    under = [message_id]
    seen = {message_id}
    for other, parent in tree.items():
        if other > message_id and parent in seen:
            seen.add(other)
            under.append(other)
    return under


def newest_leaf_under(tree: Skeleton, message_id: int) -> int:
    """The newest message in the subtree of `message_id` (itself when nothing follows it): the branch a flip to it
    shows, the one last written there. The newest descendant has no child: a child is newer than its parent."""
    return subtree(tree, message_id)[-1]


def message_in(session: Session, conversation_id: int, message_id: int) -> Message:
    """The message's row, checked to be one of the chat's (StorageError if not: it may have been deleted from
    another window)."""
    row = session.get(Message, message_id)
    if row is None or row.conversation_id != conversation_id:
        raise StorageError(f"message {message_id} is not in conversation {conversation_id}")
    return row


def children_of(session: Session, conversation_id: int, parents: list[int | None]) -> list[int]:
    """The ids of the chat's messages that follow any of `parents` (None: the chat's first messages), oldest first:
    an indexed read (messages.parent_id)."""
    known = [p for p in parents if p is not None]
    follows = [Message.parent_id.in_(known)] if known else []
    if None in parents:
        follows.append(Message.parent_id.is_(None))
    return list(session.scalars(select(Message.id).where(Message.conversation_id == conversation_id, or_(*follows))
                                .order_by(Message.id))) if follows else []


class ChatTree:
    """The tree operations of a Store (store.tree): show a branch, delete a message and what followed it, fork a
    branch into a new chat. Each is one short transaction."""

    def __init__(self, reading: Callable[[], AbstractContextManager[Session]],
                 writing: Callable[[], AbstractContextManager[Session]]):
        self._reading, self._writing = reading, writing

    def show_branch(self, conversation_id: int, message_id: int) -> None:
        """Puts on screen the branch through `message_id`: down to the newest message under it."""
        with self._writing() as session:
            conversation, tree = _chat_skeleton(session, conversation_id, message_id)
            conversation.leaf_id = newest_leaf_under(tree, message_id)

    def sibling_replies(self, conversation_id: int, message_id: int) -> list[str]:
        """The replies beside reply `message_id`, oldest first: those that answer the same message (it was
        regenerated), and those that answer the message's siblings (it answers an edited message). What a branch's
        drafting reads first: a new version of a reply repeats much of the old."""
        with self._reading() as session:  # indexed reads only: a reply in a long chat starts without a stall
            parent = message_in(session, conversation_id, message_id).parent_id
            asked = [parent]
            if parent is not None:
                asked += children_of(session, conversation_id, [message_in(session, conversation_id,
                                                                           parent).parent_id])
            beside = [m for m in children_of(session, conversation_id, list(set(asked))) if m != message_id]
            if not beside:
                return []
            return list(session.scalars(select(Message.text).where(
                Message.id.in_(beside), Message.role == "assistant", Message.text != "").order_by(Message.id)))

    def end_at(self, conversation_id: int, message_id: int) -> None:
        """Ends the branch on screen at `message_id` exactly (before a regenerated reply: the next message added
        follows it, beside the replies it already has)."""
        with self._writing() as session:
            conversation = session.get(Conversation, conversation_id)
            if conversation is None:
                raise StorageError(f"conversation {conversation_id} does not exist")
            conversation.leaf_id = message_in(session, conversation_id, message_id).id

    def delete(self, conversation_id: int, message_id: int) -> int:
        """Deletes the message and everything that followed it (its subtree; its documents with it). When the branch
        on screen went with it, the screen shows the newest branch left under its parent (or the chat's newest).
        Returns how many messages went."""
        with self._writing() as session:
            conversation, tree = _chat_skeleton(session, conversation_id, message_id)
            gone = subtree(tree, message_id)
            session.execute(delete(Message).where(Message.id.in_(gone)))
            if shown_leaf(tree, conversation.leaf_id) in set(gone):
                left = {m: p for m, p in tree.items() if m not in set(gone)}
                parent = tree[message_id]
                conversation.leaf_id = newest_leaf_under(left, parent) if parent is not None else None
            conversation.updated_at = utcnow()
            return len(gone)

    def fork(self, conversation_id: int, message_id: int) -> int:
        """A new chat made of the path from the first message down to `message_id`: the same texts, spans, stop
        marks and token ids, the same system prompt, and the documents attached on the way (their statistics stay
        with the original replies). Titled like the original, marked as a branch. Returns the new chat's id."""
        with self._writing() as session:
            original, tree = _chat_skeleton(session, conversation_id, message_id)
            path = path_to(tree, message_id)
            rows = {row.id: row for row in session.scalars(select(Message).where(Message.id.in_(path)))}
            made = Conversation(title=_fork_title(original.title), system_prompt=original.system_prompt)
            session.add(made)
            session.flush()
            copies, parent = {}, None
            for depth, old_id in enumerate(path):
                old = rows[old_id]
                copy = Message(conversation_id=made.id, parent_id=parent, position=depth, role=old.role,
                               text=old.text, created_at=old.created_at, stopped=old.stopped, spans=old.spans,
                               finish_reason=old.finish_reason, token_ids=old.token_ids)
                session.add(copy)
                session.flush()
                copies[old_id] = parent = copy.id
            made.leaf_id = parent
            for old_id, info, document in documents_of_messages(session, path):
                add_document(session, copies[old_id], made.id, document, info.tokens, info.created_at)
            return made.id


def _chat_skeleton(session: Session, conversation_id: int, message_id: int) -> tuple[Conversation, Skeleton]:
    """The chat's row and skeleton, checking that `message_id` is one of its messages (StorageError if not: it may
    have been deleted from another window)."""
    conversation = session.get(Conversation, conversation_id)
    if conversation is None:
        raise StorageError(f"conversation {conversation_id} does not exist")
    tree = skeleton(session, conversation_id)
    if message_id not in tree:
        raise StorageError(f"message {message_id} is not in conversation {conversation_id}")
    return conversation, tree


def _fork_title(title: str) -> str:
    return title if title.startswith(FORK_PREFIX) else FORK_PREFIX + title
