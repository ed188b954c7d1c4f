"""Finish reasons, the basis of the reported speedup, and calibrated baselines.

A speedup is either "measured" (against a plain-decoding run of the same prompt) or "calibrated" (against the
target's plain-decoding speed measured once on this device and dtype, kept in `calibrations`).

Revision ID: 0002_speedup_basis
Revises: 0001_initial
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_speedup_basis"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Only nullable columns are added, so SQLite's plain ALTER TABLE ADD COLUMN suffices: no table is rebuilt.
    with op.batch_alter_table("generation_runs") as batch:
        batch.add_column(sa.Column("finish_reason", sa.String, nullable=True))
        batch.add_column(sa.Column("speedup_basis", sa.String, nullable=True))
        batch.add_column(sa.Column("baseline_tokens_per_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("predicted_speedup", sa.Float, nullable=True))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("finish_reason", sa.String, nullable=True))
    op.create_table(
        "calibrations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("target", sa.String, nullable=False),
        sa.Column("device", sa.String, nullable=False),
        sa.Column("dtype", sa.String, nullable=False),
        sa.Column("tokens_per_s", sa.Float, nullable=False),
        sa.Column("measured_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_calibrations"),
    )
    op.create_index("ix_calibrations_lookup", "calibrations", ["target", "device", "dtype", "measured_at"])


def downgrade() -> None:
    op.drop_index("ix_calibrations_lookup", table_name="calibrations")
    op.drop_table("calibrations")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("finish_reason")
    with op.batch_alter_table("generation_runs") as batch:
        for name in ("predicted_speedup", "baseline_tokens_per_s", "speedup_basis", "finish_reason"):
            batch.drop_column(name)
