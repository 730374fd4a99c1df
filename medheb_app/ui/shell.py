"""The app shell: composes the tabs and the raters' page; no logic of its own.

Two pages share one Blocks: "/" (search, benchmark explorer, study results, admin) and
"/rate", the raters' page. The raters' page contains only the blinded comparison, so its
config and network traffic carry no model names (Gradio serves each page its own config).
Everything that names models (pickers, leaderboards) is filled on page load rather than baked
into the layout, which also makes new models and runs appear without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from medheb_app.services import Services
from medheb_app.ui import components as ui
from medheb_app.ui.admin_tab import build_admin_tab
from medheb_app.ui.analysis_tab import build_analysis_tab
from medheb_app.ui.compare_tab import build_compare_tab
from medheb_app.ui.explorer_tab import build_explorer_tab
from medheb_app.ui.search_tab import build_search_tab

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
COMPARE_INTRO = (
    "Raters: pick a study, type your name and judge which model's top 3 answers the query "
    "better. Studies are created by an admin (Admin tab or `python -m medheb_app study "
    "create`)."
)
ANALYSIS_INTRO = (
    "Pick a study to see preference and tie rates, Bradley-Terry scores and rater agreement "
    "once votes come in."
)
RATER_PATH = "rate"


def launch_options(services: Services) -> dict[str, Any]:
    """Keyword arguments for Blocks.launch that belong to the app (Gradio 6 takes css here)."""
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


def build_app(services: Services) -> gr.Blocks:
    """Compose every tab into one Blocks app, plus the raters' page at /rate."""
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(f"## {TITLE}\n{DESCRIPTION}", elem_id="app-description")
        with gr.Tabs():
            with gr.Tab("Search", id="search"):
                search = build_search_tab(services)
            with gr.Tab("Benchmark explorer", id="explorer"):
                gr.Markdown(EXPLORER_INTRO, elem_id="explorer-intro")
                explorer = build_explorer_tab(services)
            with gr.Tab("Blinded comparison", id="compare"):
                gr.Markdown(
                    f"{COMPARE_INTRO} The same page without the other tabs is at `/{RATER_PATH}`."
                )
                compare = build_compare_tab(services)
            with gr.Tab("Study analysis", id="analysis"):
                gr.Markdown(ANALYSIS_INTRO, elem_id="analysis-intro")
                analysis = build_analysis_tab(services)
            if services.admin_enabled:  # a public demo has no admin controls at all
                with gr.Tab("Admin", id="admin"):
                    build_admin_tab(services)
        demo.load(
            lambda: (
                *_safely(search["refresh_pickers"], 2),
                *_safely(compare["refresh_studies"]),
                *_safely(explorer["refresh_runs"]),
                *_safely(analysis["refresh_studies"]),
            ),
            None,
            [
                search["model"],
                search["index"],
                compare["study"],
                explorer["run"],
                analysis["study"],
            ],
            api_name=False,
        )
    with demo.route("Rate", f"/{RATER_PATH}") as rater_page:
        rater = build_compare_tab(services)
        rater_page.load(
            lambda: _safely(rater["refresh_studies"])[0], None, [rater["study"]], api_name=False
        )
    return demo
