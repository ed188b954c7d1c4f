"""Side-by-side comparisons, where a run came from, and the counts behind acceptance by position.

- `comparisons` / `comparison_tracks`: one prompt raced by several drafters; each track keeps what a replay needs
  (the reply's tokens, their character spans, origins and the time each token was ready).
- generation_runs gains `source` ("chat", "race" or "bench"), `comparison_id`, `category` (a benchmark prompt's)
  and the raw `proposed_by_position` / `accepted_by_position` counts: with them the distribution of accepted lengths
  is exact (steps that accepted >= i drafts = accepted_by_position[i-1]), which ratios alone cannot give.
- Repairs acceptance_by_position written by 0.x, which stored the JSON text of the list character by character.

Revision ID: 0003_comparisons
Revises: 0002_speedup_basis
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0003_comparisons"
down_revision = "0002_speedup_basis"
branch_labels = None
depends_on = None

EMPTY_LIST = sa.text("'[]'")


def upgrade() -> None:
    op.create_table(
        "comparisons",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("app_session_id", sa.Integer, nullable=True),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("target", sa.String, nullable=False),
        sa.Column("draft", sa.String, nullable=True),
        sa.Column("settings", sa.Text, nullable=False, server_default=sa.text("'{}'")),  # JSON
        sa.Column("greedy", sa.Boolean, nullable=False),
        sa.Column("identical", sa.Boolean, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_comparisons"),
        sa.ForeignKeyConstraint(["app_session_id"], ["app_sessions.id"],
                                name="fk_comparisons_app_session_id_app_sessions"),
    )
    op.create_index("ix_comparisons_created_at", "comparisons", ["created_at"])
    op.create_table(
        "comparison_tracks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("comparison_id", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("drafter", sa.String, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("finish_reason", sa.String, nullable=True),
        sa.Column("token_ids", sa.Text, nullable=False, server_default=EMPTY_LIST),  # JSON lists, one item a token
        sa.Column("token_spans", sa.Text, nullable=False, server_default=EMPTY_LIST),
        sa.Column("token_origins", sa.Text, nullable=False, server_default=EMPTY_LIST),
        sa.Column("token_times", sa.Text, nullable=False, server_default=EMPTY_LIST),
        sa.Column("stats", sa.Text, nullable=False, server_default=sa.text("'{}'")),
        sa.PrimaryKeyConstraint("id", name="pk_comparison_tracks"),
        sa.ForeignKeyConstraint(["comparison_id"], ["comparisons.id"], ondelete="CASCADE",
                                name="fk_comparison_tracks_comparison_id_comparisons"),
        sa.UniqueConstraint("comparison_id", "position", name="uq_comparison_tracks_comparison_id_position"),
    )
    with op.batch_alter_table("generation_runs") as batch:
        batch.add_column(sa.Column("source", sa.String, nullable=False, server_default=sa.text("'chat'")))
        batch.add_column(sa.Column("comparison_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("category", sa.String, nullable=True))
        batch.add_column(sa.Column("proposed_by_position", sa.Text, nullable=False, server_default=EMPTY_LIST))
        batch.add_column(sa.Column("accepted_by_position", sa.Text, nullable=False, server_default=EMPTY_LIST))
        batch.create_foreign_key("fk_generation_runs_comparison_id_comparisons", "comparisons",
                                 ["comparison_id"], ["id"], ondelete="CASCADE")
        batch.create_index("ix_generation_runs_created_at", ["created_at"])
    _repair_acceptance_by_position()


def _repair_acceptance_by_position() -> None:
    """'["[","0",".","5","]"]' (a list of the characters of '[0.5]') becomes '[0.5]'."""
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT id, acceptance_by_position FROM generation_runs")).fetchall()
    for row_id, stored in rows:
        try:
            value = json.loads(stored or "[]")
            if value and all(isinstance(item, str) for item in value):
                value = json.loads("".join(value))
            fixed = [float(x) for x in value]
        except (ValueError, TypeError):
            fixed = []
        fixed_text = json.dumps(fixed, separators=(",", ":"))
        if fixed_text != stored:
            connection.execute(sa.text("UPDATE generation_runs SET acceptance_by_position = :v WHERE id = :i"),
                               {"v": fixed_text, "i": row_id})


def downgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:
        batch.drop_index("ix_generation_runs_created_at")
        batch.drop_constraint("fk_generation_runs_comparison_id_comparisons", type_="foreignkey")
        for name in ("accepted_by_position", "proposed_by_position", "category", "comparison_id", "source"):
            batch.drop_column(name)
    op.drop_table("comparison_tracks")
    op.drop_index("ix_comparisons_created_at", table_name="comparisons")
    op.drop_table("comparisons")
