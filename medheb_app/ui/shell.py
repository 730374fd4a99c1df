"""The workbench page ("/"): composes the tabs; no logic of its own.

The raters' page is a separate Blocks mounted at /rate (medheb_app.ui.rater_app, composed by
medheb_app.ui.server), so this page's handlers are not in the raters' queue and theirs are not
here. Everything that names models (pickers, leaderboards) is filled on page load rather than
baked into the layout, which also makes new models and runs appear without a restart; what
only admins may see (study analysis, the admin panel) is decided on that load from the
request's signed cookie, and checked again inside each of their handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from medheb_app.access.auth import Authenticator
from medheb_app.api.gradio_api import add_search_api
from medheb_app.services import Services
from medheb_app.ui import components as ui
from medheb_app.ui.admin_tab import build_admin_tab
from medheb_app.ui.analysis_tab import build_analysis_tab
from medheb_app.ui.explorer_tab import build_explorer_tab
from medheb_app.ui.search_tab import build_search_tab
from medheb_app.ui.search_upload import TabLimits

log = logging.getLogger(__name__)
TITLE = "Clinical evidence retrieval workbench"
DESCRIPTION = (
    "Search chest radiographs with compositional queries (*pleural effusion and no "
    "cardiomegaly*) or an uploaded study, and compare embedding models on the MedHEB and "
    "CXR-Retrieve benchmarks. The demo images are synthetic phantoms; not for clinical use."
)
EXPLORER_INTRO = (
    "Pick a benchmark run to see its leaderboard and charts, then a task and a query to see "
    "both models' ranked lists. Runs come from the Admin tab or `python -m medheb_app bench "
    "run`."
)
ANALYSIS_INTRO = (
    "Admins: pick a study to see preference and tie rates, Bradley-Terry scores and rater "
    "agreement once votes come in (the demo ships one small study)."
)
RATER_PATH = "rate"
COMPARISON_NOTE = (
    "Blinded comparisons happen on the raters' own page, `/rate`, which raters reach through "
    "the invitation link or code an admin gives them (or open enrolment, if the study allows "
    "it). Admins create studies and invitations in the Admin tab and read the results under "
    "Study analysis."
)


def launch_options(services: Services) -> dict[str, Any]:
    """Keyword arguments shared by the mounted Blocks that belong to the app."""
    return {"css": ui.CSS, "max_file_size": services.settings.max_upload_bytes}


def _safely(refresh: Callable[[], Any], n_outputs: int = 1) -> tuple[Any, ...]:
    """Run a picker refresh; if its service fails, log it and leave the pickers as they are,
    so one broken service never blanks the whole page."""
    try:
        result = refresh()
    except Exception:
        log.exception("page load: %s failed", getattr(refresh, "__qualname__", refresh))
        return (gr.update(),) * n_outputs
    return tuple(result) if n_outputs > 1 else (result,)


CACHE_SWEEP = (600, 1800)  # (how often, how old) in seconds


def build_app(
    services: Services, auth: Authenticator | None = None, limits: TabLimits | None = None
) -> gr.Blocks:
    """Compose the workbench tabs into one Blocks app (served at "/" by the server).

    Without `auth` nobody is admin: analysis, exports, blinded drill-downs and the admin panel
    refuse every call."""
    # Gradio keeps what it renders for a session (upload previews, galleries) in its cache
    # folder under content-hashed names; drop files older than 30 minutes every 10 minutes.
    with gr.Blocks(title=TITLE, delete_cache=CACHE_SWEEP) as demo:
        gr.Markdown(f"## {TITLE}\n{DESCRIPTION}", elem_id="app-description")
        with gr.Tabs():
            with gr.Tab("Search", id="search"):
                # one per-visitor budget for the page, its /search and the REST API (the server
                # passes the limiters it gave the API)
                limits = limits or TabLimits()
                search = build_search_tab(services, limits)
                add_search_api(services, limits)  # the public JSON endpoint (api/gradio_api.py)
            with gr.Tab("Benchmark explorer", id="explorer"):
                gr.Markdown(EXPLORER_INTRO, elem_id="explorer-intro")
                explorer = build_explorer_tab(services, auth)
            with gr.Tab("Blinded comparison", id="compare"):
                gr.Markdown(COMPARISON_NOTE, elem_id="compare-pointer")
            with gr.Tab("Study analysis", id="analysis"):
                gr.Markdown(ANALYSIS_INTRO, elem_id="analysis-intro")
                analysis = build_analysis_tab(services, auth)
            admin = None
            if services.admin_enabled and auth is not None:  # a public demo has no admin
                with gr.Tab("Admin", id="admin"):
                    admin = build_admin_tab(services, auth)

        def on_load(request: gr.Request):
            is_admin = auth is not None and auth.is_admin(request)
            shown = (
                *_safely(search["refresh_pickers"], 2),
                *_safely(explorer["refresh_runs"]),
                *_safely(lambda: analysis["refresh_studies"](None, request)),
            )
            if admin is not None:
                n_admin = len(admin["load_outputs"])
                shown += _safely(lambda: admin["on_load"](is_admin), n_admin)
            return shown

        outputs = [search["model"], search["index"], explorer["run"], analysis["study"]]
        if admin is not None:
            outputs += admin["load_outputs"]
        demo.load(on_load, None, outputs, api_visibility="private")
    return demo
