"""What a run's reply promised against plain decoding: "bit-identical" or "distribution" (the same distribution,
rounding may differ: llama.cpp on its fastest kernels, or a bfloat16 target). NULL for runs stored before.

Revision ID: 0005_exactness
Revises: 0004_history
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_exactness"
down_revision = "0004_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:  # a nullable column: a plain ADD COLUMN
        batch.add_column(sa.Column("exactness", sa.String, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:
        batch.drop_column("exactness")
