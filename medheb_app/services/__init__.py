"""The application context: `Services` (settings, store, job runner, model loader, demo
bootstrap), composed once at start-up by `create_services` and passed to every tab, API route
and command that needs more than settings.

FastChat replaced its module globals with a context object; this is ours. app.py calls
`create_services(Settings.from_env())` once and hands the result to `build_app`; tests build
their own with a temporary DATA_DIR. Nothing here knows about Gradio. What the services do
lives in modules named for it: `bootstrap` (the demo's start-up thread), `admin_jobs` (what
the admin panel launches), `runs` (stored benchmark runs as the UI and API read them).

The tabs call only this object: its facades (`search`, `runs`, `studies`, `raters`,
`admin_jobs`, `tokens`, `audit`), each a small class of medheb_app/services/ bound to the
settings and store, whose methods delegate to the domain packages (no second implementation).
A facade module also re-exports the value types and errors its answers carry, so a tab imports
nothing past medheb_app.services (tests/test_architecture.py holds the list of what a ui
module may import).

The CLI commands call the same facades: a store-bound command builds its facade on
`services.store.open_store(settings)` (the store create_services opens), with no demo
bootstrap and no job runner, and imports none of the domain modules a facade wraps
(tests/test_architecture.py, FACADE_WRAPS).

`Services` and `create_services` live in services/context.py and are imported from there on
first use (PEP 562), so `import medheb_app.services` and `import medheb_app.services.tokens`
stay cheap for the fast CLI paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medheb_app.services.context import Services, create_services

__all__ = ["Services", "create_services"]


def __getattr__(name: str) -> Any:
    """The context's two names, imported on first use: a real deferral of the facades' heavy
    domain packages for callers that import only the package or one facade."""
    if name in __all__:
        # deferred: faiss, sqlalchemy, pandas, plotly (every facade's domain packages)
        from medheb_app.services import context

        return getattr(context, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
