"""Alembic environment: migrate the connection that open_database hands over in config.attributes.

Online only. There is no offline (SQL script) mode and no URL in a config file: the app owns the database file,
and the connection it passes in already has its pragmas set and its transaction begun.
"""

from alembic import context

from specchat.storage.tables import Base, in_orm_schema

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("specchat migrations run from specchat.storage.db (open_database or alembic_config)")

# render_as_batch: SQLite cannot ALTER most things, so alterations are rendered as copy-and-rename batches.
# include_name: the full-text index (a virtual table) and its shadow tables are not the models' to describe.
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                  include_name=in_orm_schema)
with context.begin_transaction():
    context.run_migrations()
