"""Which chats the history drafter may learn from.

- conversations gains `in_history`: the replies of a chat with it set feed the "draft from past replies" index
  (engine/drafting/past_replies.py). Chats made in the app have it from the start; an imported chat gets it only once the user
  opens it, so text the user has never seen in the app is never proposed as a draft.

Revision ID: 0004_history
Revises: 0003_comparisons
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_history"
down_revision = "0003_comparisons"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("in_history", sa.Boolean, nullable=False, server_default=sa.text("1")))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("in_history")
