"""A chat's history as a tree, pins and folders, a reply's token ids, and a full-text index over messages.

- `messages.parent_id`: the message this one answers or follows (NULL for a chat's first). Siblings (an edited
  message, a regenerated reply) share a parent; nothing is deleted to make one. Deleting a message deletes what
  followed it (ON DELETE CASCADE). Every existing chat becomes one branch: each message's parent is the message
  before it. `position` becomes the depth in the tree, so the unique (conversation, position) gives way to an index.
- `messages.token_ids`: a reply's token ids under the model that wrote it (its run's target), JSON; NULL for user
  messages, imports and replies written before 0007. Continuing a reply feeds these ids back, so that the text is
  not tokenized again differently.
- `conversations.leaf_id`: the last message of the branch on screen (NULL: the newest leaf). A plain integer, not a
  foreign key, so that the two tables do not refer to each other in a cycle; a leaf that was deleted reads as NULL.
- `conversations.pinned` and `conversations.folder_id`; `folders` (a name each, unique).
- `messages_fts`: an FTS5 index over the messages' text (external content, kept in step by triggers; the update
  trigger fires only when the text changes, so saving a reply's spans does not re-index it). Built over every
  existing message here.

Revision ID: 0007_history_tree
Revises: 0006_documents
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_history_tree"
down_revision = "0006_documents"
branch_labels = None
depends_on = None

FTS_TABLE = "messages_fts"  # tables.MESSAGES_FTS_TABLE: a migration keeps its own copy of what it created
TRIGGERS = {
    "messages_fts_insert": "AFTER INSERT ON messages BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END",
    "messages_fts_delete": "AFTER DELETE ON messages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
    "messages_fts_update": "AFTER UPDATE OF text ON messages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END",
}


def upgrade() -> None:
    """Folders first (conversations refer to them), then the columns, each chat's one branch, and the index."""
    op.create_table(
        "folders",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_folders"),
        sa.UniqueConstraint("name", name="uq_folders_name"),
    )
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("leaf_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("pinned", sa.Boolean, nullable=False, server_default=sa.text("0")))
        batch.add_column(sa.Column("folder_id", sa.Integer, nullable=True))
        batch.create_foreign_key("fk_conversations_folder_id_folders", "folders", ["folder_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_index("ix_conversations_folder_id", ["folder_id"])
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("token_ids", sa.Text, nullable=True))
        batch.drop_constraint("uq_messages_conversation_id_position", type_="unique")
        batch.create_foreign_key("fk_messages_parent_id_messages", "messages", ["parent_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_messages_conversation_id_position", ["conversation_id", "position"])
        batch.create_index("ix_messages_parent_id", ["parent_id"])
    _one_branch_per_chat()
    op.execute(f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(text, content='messages', content_rowid='id', "
               "tokenize='porter unicode61 remove_diacritics 2')")
    for name, body in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")
    op.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")


def _one_branch_per_chat() -> None:
    """Each message follows the one before it (positions were unique and dense per chat before 0007), and each
    chat shows its last message."""
    op.execute("UPDATE messages SET parent_id = (SELECT p.id FROM messages AS p WHERE "
               "p.conversation_id = messages.conversation_id AND p.position = messages.position - 1)")
    op.execute("UPDATE conversations SET leaf_id = (SELECT m.id FROM messages AS m WHERE "
               "m.conversation_id = conversations.id ORDER BY m.position DESC LIMIT 1)")


def downgrade() -> None:
    """Back to one list per chat: the branch on screen is kept and the other branches are deleted (a downgrade
    cannot keep what 0006 has no place for)."""
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
    op.execute("WITH RECURSIVE shown(id, parent_id) AS (SELECT m.id, m.parent_id FROM messages AS m JOIN "
               "conversations AS c ON m.id = c.leaf_id UNION ALL SELECT m.id, m.parent_id FROM messages AS m "
               "JOIN shown ON m.id = shown.parent_id) DELETE FROM messages WHERE id NOT IN (SELECT id FROM shown) "
               "AND conversation_id IN (SELECT id FROM conversations WHERE leaf_id IS NOT NULL)")
    with op.batch_alter_table("messages") as batch:
        batch.drop_index("ix_messages_parent_id")
        batch.drop_index("ix_messages_conversation_id_position")
        batch.drop_constraint("fk_messages_parent_id_messages", type_="foreignkey")
        batch.create_unique_constraint("uq_messages_conversation_id_position", ["conversation_id", "position"])
        batch.drop_column("token_ids")
        batch.drop_column("parent_id")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_index("ix_conversations_folder_id")
        batch.drop_constraint("fk_conversations_folder_id_folders", type_="foreignkey")
        batch.drop_column("folder_id")
        batch.drop_column("pinned")
        batch.drop_column("leaf_id")
    op.drop_table("folders")
