"""Benchmark explorer: leaderboards and charts from stored runs, and a per-query drill-down.

Runs of both kinds (MedHEB suites, CXR-Retrieve) come through services.runs (the UI never
queries the store) as Summary files; the paper tables come from medheb_app.eval.reports
and eval.cxr_tables, the drill-down's data from medheb_app.eval.drilldown. The filtered
leaderboard and the per-family / per-split bars are task-macro averages over the tasks that
pass the filters, as MedHEB's ID / held-out / all columns are (Table 4); the run-level figures
(accuracy vs CV, difficulty, relation gap, graded NDCG) come from medheb_app.eval.figures.
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from medheb_app.eval import drilldown, figures, reports
from medheb_app.eval.leaderboard import (  # noqa: F401  (re-exported: eval's tables)
    METRICS,
    cxr_finding_table,
    cxr_leaderboard,
    filter_frame,
    leaderboard,
    leaderboard_with_ci,
    task_frame,
)
from medheb_app.eval.results import Summary
from medheb_app.services import Services
from medheb_app.services.runs import BASELINES, SKIPPED_COLUMNS, run_shared_data_line
from medheb_app.ui import components as ui
from medheb_app.ui.drilldown_view import drilldown_html

log = logging.getLogger(__name__)
RANKED_SHOWN = 10


# ---------------------------------------------------------------- data


def run_choices(services: Services) -> list[tuple[str, int]]:
    """Finished runs of either kind, newest first, as (label, run id)."""
    return services.runs.choices()


def load_summary(services: Services, run_id: int) -> Summary:
    """The Summary of a stored run, read from its out_dir."""
    return services.runs.summary(run_id)


def skipped_frame(services: Services, summary: Summary | None, is_admin: bool) -> pd.DataFrame:
    """The run's "Skipped tasks" table: task, model, reason (server paths for admins only)."""
    rows = services.runs.skipped(summary, is_admin) if summary is not None else []
    return pd.DataFrame(rows, columns=list(SKIPPED_COLUMNS))


# ---------------------------------------------------------------- figures


def _empty_figure(message: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    return figure


def grouped_figure(
    frame: pd.DataFrame, by: str, title: str, colours: dict[str, str] | None = None
) -> go.Figure:
    """Task-macro Hit@1 per model, grouped by `by` (family or split); random and oracle are
    floor and ceiling marks, each model keeps its recorded colour (eval.colours)."""
    single = frame[~frame["graded"]]
    if single.empty:
        return _empty_figure("No single-positive task matches the filters.")
    data = single.groupby([by, "model"], as_index=False)["hit@1"].mean()
    bars = data[~data["model"].isin(list(figures.BOUND_STYLE))]
    figure = px.bar(
        bars,
        x=by,
        y="hit@1",
        color="model",
        barmode="group",
        title=title,
        color_discrete_map=colours or figures.model_colours(bars["model"].unique()),
    )
    groups = list(dict.fromkeys(data[by]))
    bounds = {
        name: [
            rows["hit@1"].item()
            if len(rows := data[(data["model"] == name) & (data[by] == g)])
            else None
            for g in groups
        ]
        for name in figures.BOUND_STYLE
        if name in set(data["model"])
    }
    figures.add_bounds(figure, groups, bounds)
    figure.update_yaxes(title="Hit@1 (%)", range=[0, 105])
    return figure


def scatter_figure(frame: pd.DataFrame, model_x: str | None, model_y: str | None) -> go.Figure:
    """Per-task Hit@1 of one model against another; points above the diagonal favour y."""
    if not model_x or not model_y or model_x == model_y:
        return _empty_figure("Pick two different models.")
    single = frame[~frame["graded"]]
    wide = single.pivot_table(index=["task", "family"], columns="model", values="hit@1")
    if model_x not in wide or model_y not in wide:
        return _empty_figure("Both models need scores on the filtered tasks.")
    data = wide[[model_x, model_y]].dropna().reset_index()
    figure = px.scatter(
        data, x=model_x, y=model_y, color="family", hover_name="task", title="Per-task Hit@1 (%)"
    )
    figure.add_shape(type="line", x0=0, y0=0, x1=100, y1=100, line={"dash": "dot"})
    figure.update_xaxes(range=[-2, 102])
    figure.update_yaxes(range=[-2, 102])
    return figure


# ---------------------------------------------------------------- drill-down


def query_choices(
    summary: Summary, task: str | None, models: list[str], failures_only: bool = False
) -> list[tuple[str, str]]:
    """(label with a ✓ / ✗ per model, query id) for a task; only misses when asked."""
    if not task:
        return []
    models = [m for m in models if m in summary.models] or list(summary.models)
    outcomes = drilldown.query_outcomes(summary, task, models)
    return [
        (outcome.label(models), outcome.id)
        for outcome in outcomes
        if outcome.failed or not failures_only
    ]


def query_ids(summary: Summary, task: str | None) -> list[str]:
    """The query ids of a task (a regime for CXR-Retrieve), from the run's files."""
    return [qid for _, qid in query_choices(summary, task, list(summary.models))]


def ranked_lists_html(
    summary: Summary, task: str | None, query_id: str | None, models: list[str]
) -> str:
    """The query as what it is, then each chosen model's top-k side by side with thumbnails,
    finding chips, the gold marked and each violated constraint named."""
    if not task or not query_id:
        return ui.notice_html("info", "Pick a task and a query.")
    chosen = [m for m in models if m in summary.models]
    if not chosen:
        return ui.notice_html("info", "Pick one or two models to compare.")
    view = drilldown.query_view(summary, task, str(query_id), chosen)
    return drilldown_html(view, drilldown.ranked_views(summary, task, str(query_id), chosen))


# ---------------------------------------------------------------- layout


def _options(frame: pd.DataFrame, column: str) -> list[str]:
    return sorted(str(v) for v in frame[column].dropna().unique() if str(v))


def _real_models(names: list[str]) -> list[str]:
    """The run's models without the baselines (drawn as floor / ceiling marks, not bars)."""
    return [name for name in names if name not in BASELINES] or names


BLINDED_NOTE = (
    "This run is the source of an open reader study: its per-query ranked lists are shown to "
    "admins only until the study closes."
)


def build_explorer_tab(services: Services, auth: Any = None) -> dict[str, Any]:
    """Run picker, filters, leaderboard tables and charts, and the query drill-down.

    `auth` (medheb_app.access.auth.Authenticator) decides who may drill into a blinded run;
    without one, nobody may."""
    with gr.Row():
        run = gr.Dropdown(label="Run", choices=[], elem_id="explorer-run")
        refresh = gr.Button("Refresh runs", size="sm")
    notice = gr.HTML()
    with gr.Row():
        families = gr.Dropdown(label="Family", choices=[], multiselect=True)
        forms = gr.Dropdown(label="Evidence form", choices=[], multiselect=True)
        splits = gr.Dropdown(label="Split", choices=[], multiselect=True)
        models = gr.Dropdown(label="Model", choices=[], multiselect=True)
    board = gr.Dataframe(
        label="Leaderboard (task-macro over the filtered tasks, %, with 95% bootstrap CI)",
        pinned_columns=1,
        elem_id="explorer-board",
    )
    table4 = gr.Dataframe(
        label="Paper table: MedHEB Table 4 (Hit@1 (MRR@5)) or CXR-Retrieve per finding",
        pinned_columns=1,
        elem_id="explorer-table",
    )
    skipped = gr.Dataframe(
        label="Skipped tasks (not in the tables above, and why)",
        interactive=False,
        elem_id="explorer-skipped",
    )
    shared_data = gr.Markdown("", elem_id="explorer-shared-data")  # admins only
    with gr.Row():
        family_plot = gr.Plot(label="Per family")
        split_plot = gr.Plot(label="ID vs held-out")
    with gr.Row():
        cv_plot = gr.Plot(label="Accuracy vs cross-family CV")
        difficulty_plot = gr.Plot(label="Difficulty buckets")
    with gr.Row():
        gap_plot = gr.Plot(label="Established vs under-explored")
        graded_plot = gr.Plot(label="Graded NDCG@5")
    with gr.Row():
        model_x = gr.Dropdown(label="Scatter: model on x", choices=[])
        model_y = gr.Dropdown(label="Scatter: model on y", choices=[])
    scatter_plot = gr.Plot(label="Model vs model")
    gr.Markdown(
        "### Drill down: task → query → two models side by side\n"
        "Each query is marked ✓ (top 1 relevant) or ✗ per model compared."
    )
    with gr.Row():
        task = gr.Dropdown(
            label="Task (regime for CXR-Retrieve)", choices=[], elem_id="explorer-task"
        )
        compare_models = gr.Dropdown(
            label="Models to compare",
            choices=[],
            multiselect=True,
            max_choices=2,
            elem_id="explorer-compare",
        )
        failures = gr.Checkbox(label="Failures only", value=False, elem_id="explorer-failures")
    query = gr.Dropdown(label="Query", choices=[], elem_id="explorer-query")
    ranked = gr.HTML(elem_id="explorer-ranked")
    summary_state = gr.State(None)

    def _load(run_id):
        try:
            summary = load_summary(services, run_id) if run_id is not None else None
        except (KeyError, ValueError, FileNotFoundError, OSError) as error:
            log.warning("run %s unreadable: %s", run_id, error)
            summary, message = None, f"Run {run_id} cannot be read: {error}"
        else:
            message = "" if summary else "No finished benchmark run yet."
        if summary is None:
            empty = gr.update(choices=[], value=[])
            return (
                None,
                ui.notice_html("info", message),
                empty,
                empty,
                empty,
                empty,
                gr.update(choices=[], value=None),
                gr.update(choices=[], value=None),
                gr.update(choices=[], value=None),
                empty,
                None,
            )
        names = list(summary.models)
        tasks = drilldown.drill_tasks(summary)
        compared = _real_models(names)[:2]
        if summary.kind == "cxr-retrieve":
            filters = [gr.update(choices=[], value=[])] * 4
            paper = pd.DataFrame(cxr_finding_table(summary))
            first_task = "negation"
        else:
            frame = task_frame(summary)
            filters = [
                gr.update(choices=_options(frame, "family"), value=[]),
                gr.update(choices=_options(frame, "form"), value=[]),
                gr.update(choices=_options(frame, "split"), value=[]),
                gr.update(choices=names, value=[]),
            ]
            paper = pd.DataFrame(reports.table4_rows(summary))
            first_task = tasks[0] if tasks else None
        return (
            summary,
            "",
            *filters,
            gr.update(choices=names, value=names[0]),
            gr.update(choices=names, value=names[-1]),
            gr.update(choices=tasks, value=first_task),
            gr.update(choices=names, value=compared),
            paper,
        )

    def _views(summary, fam, frm, spl, mdl, mx, my):
        if summary is None:
            blank = _empty_figure("No run selected.")
            return None, *[blank] * 7
        palette = services.runs.colours(list(summary.models))
        if summary.kind == "cxr-retrieve":  # MedHEB's family / CV / difficulty charts hide
            hidden = gr.update(value=None, visible=False)
            return (
                cxr_leaderboard(summary),
                figures.cxr_regimes(summary, colours=palette),
                figures.cxr_regimes(summary, metric="HNRR@5", kinds=("negation",), colours=palette),
                *[hidden] * 5,
            )
        frame = filter_frame(task_frame(summary), fam, frm, spl, mdl)
        return (
            leaderboard_with_ci(summary, frame),
            grouped_figure(frame, "family", "Hit@1 per family", palette),
            grouped_figure(frame, "split", "Hit@1: ID vs held-out source", palette),
            *[
                gr.update(value=figure, visible=True)
                for figure in (
                    figures.accuracy_vs_balance(summary, colours=palette),
                    figures.difficulty_buckets(summary, colours=palette),
                    figures.relation_gap(summary, colours=palette),
                    figures.graded_ndcg(summary, colours=palette),
                    scatter_figure(frame, mx, my),
                )
            ],
        )

    def _skipped(summary, request: gr.Request):
        admin = auth is not None and auth.is_admin(request)
        line = run_shared_data_line(summary) if admin and summary is not None else ""
        return skipped_frame(services, summary, admin), line

    def _blinded(summary, request: gr.Request) -> bool:
        admin = auth is not None and auth.is_admin(request)
        return not admin and services.runs.is_blinded(getattr(summary, "out_dir", None))

    def _queries(summary, name, chosen, failures_only, request: gr.Request):
        """The task's queries and the first one's drill-down in one call: a separate redraw on
        query.change could pair a stale query with the new task (an empty pane) or, when the
        two tasks' first query ids are equal, not run at all."""
        if summary is None:
            return gr.update(choices=[], value=None), ""
        if _blinded(summary, request):  # per-model hit / miss marks would unblind the study
            ids = query_ids(summary, name)
            first = ids[0] if ids else None
            return gr.update(choices=ids, value=first), _ranked(
                summary, name, first, chosen, request
            )
        choices = query_choices(summary, name, list(chosen or []), bool(failures_only))
        first = choices[0][1] if choices else None
        return gr.update(choices=choices, value=first), _ranked(
            summary, name, first, chosen, request
        )

    def _ranked(summary, name, qid, chosen, request: gr.Request):
        if summary is None:
            return ""
        if _blinded(summary, request):
            return ui.notice_html("warning", BLINDED_NOTE)
        return ranked_lists_html(summary, name, qid, list(chosen or []))

    load_outputs = [
        summary_state,
        notice,
        families,
        forms,
        splits,
        models,
        model_x,
        model_y,
        task,
        compare_models,
        table4,
    ]
    view_inputs = [summary_state, families, forms, splits, models, model_x, model_y]
    view_outputs = [
        board,
        family_plot,
        split_plot,
        cv_plot,
        difficulty_plot,
        gap_plot,
        graded_plot,
        scatter_plot,
    ]
    query_inputs = [summary_state, task, compare_models, failures]
    loaded = run.change(_load, [run], load_outputs, api_visibility="private")
    loaded.then(_views, view_inputs, view_outputs, api_visibility="private").then(
        _queries, query_inputs, [query, ranked], api_visibility="private"
    )
    loaded.then(_skipped, [summary_state], [skipped, shared_data], api_visibility="private")
    for control in (families, forms, splits, models, model_x, model_y):
        # .input (user edits only): a run load sets all of them and redraws once, via .then
        control.input(_views, view_inputs, view_outputs, api_visibility="private")
    for control in (task, compare_models, failures):
        control.input(_queries, query_inputs, [query, ranked], api_visibility="private")
    # a query the user picks (a task's first query is drawn by _queries itself)
    query.input(
        _ranked, [summary_state, task, query, compare_models], [ranked], api_visibility="private"
    )

    def _refresh_runs(current=None):
        choices = run_choices(services)
        ids = [value for _, value in choices]
        return gr.update(choices=choices, value=current if current in ids else (ids or [None])[0])

    refresh.click(_refresh_runs, [run], [run], api_visibility="private")
    return {"run": run, "board": board, "ranked": ranked, "refresh_runs": _refresh_runs}
