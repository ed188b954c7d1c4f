"""Documents attached to a chat's messages, their passages, and a full-text index over the passages.

- `documents`: the text read from one attached file, with its pages (page_starts: JSON list of character offsets),
  size, SHA-256 and its token count under the model it was attached with; deleted with its message or chat.
- `document_passages`: the document's text cut for retrieval, one row a passage, unique by (document, position).
- `generation_runs.sources`: what a reply was given of the chat's documents (JSON: [document id, name, page,
  passage] each, passage null for a whole document); NULL for runs that had none.
- `document_passages_fts`: an FTS5 index over the passages' text (external content: the text is kept once, in
  document_passages), kept in step by three triggers. The ORM models leave it out (tables.in_orm_schema): SQLAlchemy
  cannot describe a virtual table, and its shadow tables are FTS5's own.

Revision ID: 0006_documents
Revises: 0005_exactness
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_documents"
down_revision = "0005_exactness"
branch_labels = None
depends_on = None

FTS_TABLE = "document_passages_fts"  # tables.FTS_TABLE: a migration keeps its own copy of what it created
TRIGGERS = {
    "document_passages_fts_insert": "AFTER INSERT ON document_passages BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END",
    "document_passages_fts_delete": "AFTER DELETE ON document_passages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
    "document_passages_fts_update": "AFTER UPDATE ON document_passages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END",
}


def upgrade() -> None:
    """Creates the two tables, then the index over the passages and the triggers that keep it in step."""
    _create_documents()
    _create_passages()
    # porter: "attaching" finds "attached"; unicode61 with diacritics removed: "resume" finds "résumé"
    op.execute(f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(text, content='document_passages', "
               "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')")
    for name, body in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")
    with op.batch_alter_table("generation_runs") as batch:  # a nullable column: a plain ADD COLUMN
        batch.add_column(sa.Column("sources", sa.Text, nullable=True))


def _create_documents() -> None:
    op.create_table(
        "documents",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("message_id", sa.Integer, nullable=False),
        sa.Column("conversation_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("pages", sa.Integer, nullable=True),
        sa.Column("page_starts", sa.Text, nullable=False, server_default=sa.text("'[]'")),  # JSON list of offsets
        sa.Column("chars", sa.Integer, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        # last: SQLite reads a row's columns in order, and a column after megabytes of text costs a walk through
        # them (listing a chat's documents reads every column but this one)
        sa.Column("text", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE",
                                name="fk_documents_message_id_messages"),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name="fk_documents_conversation_id_conversations"),
    )
    op.create_index("ix_documents_message_id", "documents", ["message_id"])
    op.create_index("ix_documents_conversation_id", "documents", ["conversation_id"])


def _create_passages() -> None:
    op.create_table(
        "document_passages",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("document_id", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("page", sa.Integer, nullable=True),
        sa.Column("start", sa.Integer, nullable=False),
        sa.Column("end", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_document_passages"),
        sa.ForeignKeyConstraint(["document_id"], ["documents.id"], ondelete="CASCADE",
                                name="fk_document_passages_document_id_documents"),
        sa.UniqueConstraint("document_id", "position", name="uq_document_passages_document_id_position"),
    )


def downgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:
        batch.drop_column("sources")
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
    op.drop_table("document_passages")
    op.drop_index("ix_documents_conversation_id", table_name="documents")
    op.drop_index("ix_documents_message_id", table_name="documents")
    op.drop_table("documents")
