"""Study analysis: preference rates with intervals by top-1 stratum, Bradley-Terry, agreement,
position bias and a CSV of the votes (MedHEB section 5.6, Figure 7).

Every number comes from medheb_app.study.analysis over medheb_app.study.export.votes_frame;
this module only lays them out. Analysis and export name the models, so both are admin-only,
checked inside each handler from the request's cookie (a call by `fn_index` from any session
gets nothing without it).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from medheb_app.services import Services
from medheb_app.ui import components as ui

OUTCOME_LABELS = {"a": "A preferred", "b": "B preferred", "tie": "Tie", "both_poor": "Both poor"}


def study_options(services: Services) -> list[tuple[str, int]]:
    from medheb_app.study.items import list_studies

    return [
        (f"Study {s['id']}: {s['name']} ({s['votes']} votes)", int(s["id"]))
        for s in list_studies(services.store)
    ]


def _percent(rate: float | None, lo: float | None, hi: float | None) -> str:
    if rate is None or pd.isna(rate):
        return "–"
    return f"{100 * rate:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]"


def rates_table(rates: pd.DataFrame) -> pd.DataFrame:
    """One row per (pair, stratum): n and each outcome's rate with its 95% Wilson interval."""
    rows = []
    for record in rates.to_dict(orient="records"):
        row = {
            "model A": record["model_a"],
            "model B": record["model_b"],
            "stratum": record["stratum"],
            "n": record["n"],
        }
        for key, label in OUTCOME_LABELS.items():
            row[label] = _percent(record[f"{key}_rate"], record[f"{key}_lo"], record[f"{key}_hi"])
        rows.append(row)
    return pd.DataFrame(rows)


def overview_html(summary: dict[str, Any]) -> str:
    agreement, bias = summary["agreement"], summary["position_bias"]
    kappa = agreement.get("kappa")
    agree = (
        f"{agreement['method']} kappa {kappa:.2f} on {agreement['n_items']} items"
        if agreement.get("method") and kappa is not None
        else "no item has two raters yet"
    )
    left = bias.get("left_rate")
    position = (
        f"left list chosen in {100 * left:.0f}% of {bias['n']} A/B votes "
        f"(95% CI {100 * bias['lo']:.0f}-{100 * bias['hi']:.0f}%, binomial p = "
        f"{bias['p_value']:.3f})"
        if left is not None
        else "no A/B votes yet"
    )
    return (
        f"<div><b>{summary['n_votes']}</b> votes on <b>{summary['n_items']}</b> items by "
        f"<b>{summary['n_raters']}</b> raters.</div>"
        f"<div>Rater agreement: {html.escape(agree)}.</div>"
        f"<div>Position bias: {html.escape(position)}.</div>"
        f"<div><i>{html.escape(summary['ties'])}.</i></div>"
    )


def analyse(services: Services, study_id: Any):
    """(overview html, rates table, Bradley-Terry table, stratum figure) for one study."""
    from medheb_app.study.analysis import preference_rates, stratum_figure, summarise
    from medheb_app.study.export import votes_frame

    if study_id in (None, ""):
        return ui.notice_html("info", "Pick a study."), None, None, None
    try:
        votes = votes_frame(services.store, int(study_id))
    except ValueError as error:
        return ui.notice_html("error", str(error)), None, None, None
    if votes.empty:
        return ui.notice_html("info", "No votes in this study yet."), None, None, None
    summary = summarise(votes)
    bt = pd.DataFrame(summary["bradley_terry"])
    return overview_html(summary), rates_table(preference_rates(votes)), bt, stratum_figure(votes)


def export(services: Services, study_id: Any) -> str | None:
    """Write the study's votes to a CSV under DATA_DIR/exports and return its path."""
    from medheb_app.study.export import export_csv

    if study_id in (None, ""):
        return None
    out = Path(services.settings.data_dir) / "exports" / f"study-{int(study_id)}-votes.csv"
    export_csv(services.store, out, int(study_id))
    return str(out)


ADMIN_ONLY = "Study analysis is for admins only while studies run: sign in as admin to see it."


def build_analysis_tab(services: Services, auth: Any = None) -> dict[str, Any]:
    with gr.Row():
        study = gr.Dropdown(label="Study", choices=[], elem_id="analysis-study")
        refresh = gr.Button("Refresh", size="sm")
    overview = gr.HTML()
    rates = gr.Dataframe(label="Preference rates by top-1 stratum (95% Wilson CI)")
    bt = gr.Dataframe(label="Bradley-Terry strengths (bootstrap intervals)")
    figure = gr.Plot(label="Outcomes by stratum")
    download = gr.DownloadButton("Download votes (CSV)")

    def _admin(request: Any) -> bool:
        return auth is not None and auth.is_admin(request)

    def _refresh(current=None, request: gr.Request = None):
        if not _admin(request):
            return gr.update(choices=[], value=None)
        choices = study_options(services)
        ids = [value for _, value in choices]
        return gr.update(choices=choices, value=current if current in ids else (ids or [None])[0])

    def _show(study_id, request: gr.Request):
        if not _admin(request):
            return ui.notice_html("info", ADMIN_ONLY), None, None, None, None
        return (*analyse(services, study_id), export(services, study_id))

    study.change(_show, [study], [overview, rates, bt, figure, download], api_name=False)
    refresh.click(_refresh, [study], [study], api_name=False).then(
        _show, [study], [overview, rates, bt, figure, download], api_name=False
    )
    return {"study": study, "overview": overview, "refresh_studies": _refresh}
