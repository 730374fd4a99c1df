"""The store as the services open it (`open_store`): DATA_DIR made if missing, the schema
ensured. `create_services` and the store-bound CLI commands (token, audit, study) call it, so
a command builds its facade on the same store the tabs use without the demo bootstrap or a
job runner."""

from __future__ import annotations

from medheb_app.settings import Settings
from medheb_app.store.db import Store


def open_store(settings: Settings) -> Store:
    """The settings' database, opened (tables created or migrated) under a DATA_DIR that exists."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return Store.open(settings.database_url)
