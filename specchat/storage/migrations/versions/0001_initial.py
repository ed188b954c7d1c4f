"""Initial schema: conversations, messages, app sessions and generation runs.

Revision ID: 0001_initial
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

ZERO = sa.text("0")


def upgrade() -> None:
    """Creates the four tables (in this order: their foreign keys point backwards) and their indexes."""
    _create_conversations()
    _create_messages()
    _create_app_sessions()
    _create_generation_runs()


def _create_conversations() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.String, nullable=False),
        sa.Column("system_prompt", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
    )
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])


def _create_messages() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("conversation_id", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("stopped", sa.Boolean, nullable=False, server_default=ZERO),
        sa.Column("spans", sa.Text, nullable=True),  # JSON: [[start, end, "draft" | "target"], ...]
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name="fk_messages_conversation_id_conversations"),
        sa.UniqueConstraint("conversation_id", "position", name="uq_messages_conversation_id_position"),
    )


def _create_app_sessions() -> None:
    op.create_table(
        "app_sessions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("ended_at", sa.DateTime, nullable=True),
        sa.Column("app_version", sa.String, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_app_sessions"),
    )


def _create_generation_runs() -> None:
    op.create_table(
        "generation_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("message_id", sa.Integer, nullable=True),
        sa.Column("conversation_id", sa.Integer, nullable=True),
        sa.Column("app_session_id", sa.Integer, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("target", sa.String, nullable=False),
        sa.Column("draft", sa.String, nullable=True),
        sa.Column("drafter", sa.String, nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("adaptive", sa.Boolean, nullable=False),
        sa.Column("temperature", sa.Float, nullable=False),
        sa.Column("top_p", sa.Float, nullable=False),
        sa.Column("top_k", sa.Integer, nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("device", sa.String, nullable=False),
        *[sa.Column(name, sa.Integer, nullable=False, server_default=ZERO)
          for name in ("prompt_tokens", "new_tokens", "target_passes", "draft_proposed", "draft_accepted")],
        *[sa.Column(name, sa.Float, nullable=False, server_default=ZERO)
          for name in ("tokens_per_s", "prefill_s", "draft_s", "verify_s", "wall_s")],
        sa.Column("acceptance_by_position", sa.Text, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("speedup", sa.Float, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_generation_runs"),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="SET NULL",
                                name="fk_generation_runs_message_id_messages"),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="SET NULL",
                                name="fk_generation_runs_conversation_id_conversations"),
        sa.ForeignKeyConstraint(["app_session_id"], ["app_sessions.id"],
                                name="fk_generation_runs_app_session_id_app_sessions"),
    )
    for column in ("message_id", "conversation_id", "app_session_id"):
        op.create_index(f"ix_generation_runs_{column}", "generation_runs", [column])


def downgrade() -> None:
    op.drop_table("generation_runs")
    op.drop_table("app_sessions")
    op.drop_table("messages")
    op.drop_index("ix_conversations_updated_at", table_name="conversations")
    op.drop_table("conversations")
