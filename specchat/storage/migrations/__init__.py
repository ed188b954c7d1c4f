"""Alembic migrations of the chat database, run by specchat.storage.db.open_database (there is no alembic.ini)."""
