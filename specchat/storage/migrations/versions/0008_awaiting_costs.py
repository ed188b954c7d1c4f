"""Whether a run's drafter was held back for the whole reply because this machine's verification costs were still
being measured (a model's first reply here): its footer then says why it decoded plainly. NULL for runs stored
before, which read as not held back.

Revision ID: 0008_awaiting_costs
Revises: 0007_history_tree
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_awaiting_costs"
down_revision = "0007_history_tree"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:  # a nullable column: a plain ADD COLUMN
        batch.add_column(sa.Column("awaiting_costs", sa.Boolean, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generation_runs") as batch:
        batch.drop_column("awaiting_costs")
