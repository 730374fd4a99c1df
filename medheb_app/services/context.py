"""`Services` and `create_services`: the application context itself (see the package
docstring). It lives here, not in the package's __init__, so that importing one facade
module, or the package, does not import every facade and its domain packages
(faiss, sqlalchemy, pandas, plotly: about 8 s); the package hands these two names out on
first use.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from medheb_app.access.auth import oauth_available
from medheb_app.index.catalog import list_indices
from medheb_app.jobs import JobRunner
from medheb_app.models import registry
from medheb_app.models.base import Embedder
from medheb_app.models.registry import list_models
from medheb_app.services.admin_jobs import AdminJobs
from medheb_app.services.audit import Audit
from medheb_app.services.bootstrap import DemoBootstrap, EnsureDemo
from medheb_app.services.raters import Raters
from medheb_app.services.runs import Runs
from medheb_app.services.search import SearchService
from medheb_app.services.store import open_store
from medheb_app.services.studies import Studies
from medheb_app.services.tokens import Tokens
from medheb_app.settings import Settings
from medheb_app.store.db import Store


def _registry_loader(settings: Settings) -> Callable[[str], Embedder]:
    def load(spec: str) -> Embedder:
        return registry.load_embedder(spec, settings)

    return load


@dataclass
class Services:
    """Settings, the store, the job runner, the model loader, the demo bootstrap, and the
    domain facades bound to them."""

    settings: Settings
    store: Store
    jobs: JobRunner
    bootstrap: DemoBootstrap
    load_embedder: Callable[[str], Embedder] = field(repr=False)
    search: SearchService = field(init=False, repr=False)
    runs: Runs = field(init=False, repr=False)
    studies: Studies = field(init=False, repr=False)
    raters: Raters = field(init=False, repr=False)
    admin_jobs: AdminJobs = field(init=False, repr=False)
    tokens: Tokens = field(init=False, repr=False)
    audit: Audit = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.search = SearchService(self.settings, self.store)
        self.runs = Runs(self.settings, self.store, self.jobs)
        self.studies = Studies(self.settings, self.store)
        self.raters = Raters(self.store)
        self.admin_jobs = AdminJobs(self.settings, self.jobs)
        self.tokens = Tokens(self.store)
        self.audit = Audit(self.settings, self.store)

    @property
    def admin_enabled(self) -> bool:
        """Admin controls exist only when ADMIN_PASSWORD or ADMIN_USERS is set (a public demo
        has none)."""
        return bool(
            self.settings.admin_password or (self.settings.admin_users and oauth_available())
        )

    def check_admin(self, password: str | None) -> bool:
        """Constant-time password check; always False when no admin password is configured."""
        if not self.admin_enabled or not password:
            return False
        return hmac.compare_digest(password.encode(), self.settings.admin_password.encode())

    def list_models(self) -> list[dict[str, Any]]:
        """Every embedder spec the pickers offer, read fresh so new checkpoints appear."""
        return list_models(self.settings)

    def list_indices(self) -> list[Any]:
        """Every built index, read fresh so a new index build appears without restart."""
        return list_indices(self.settings)


def create_services(
    settings: Settings,
    ensure_demo: EnsureDemo | None = None,
    start_bootstrap: bool = True,
) -> Services:
    """Open the store, recover interrupted jobs, and start the demo bootstrap in the background.
    `settings` is required: the caller (app.py, a test) reads the environment, never this."""
    store = open_store(settings)
    bootstrap = DemoBootstrap(settings, ensure_demo)
    if start_bootstrap:
        bootstrap.start()
    return Services(
        settings=settings,
        store=store,
        jobs=JobRunner(store, settings),
        bootstrap=bootstrap,
        load_embedder=_registry_loader(settings),
    )
