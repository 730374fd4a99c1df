"""Benchmark explorer: leaderboards and charts from stored runs, and a per-query drill-down.

Runs come from the store (medheb_app.store.runs) and their files (Summary / TaskRun in
medheb_app.eval.results); the paper tables come from medheb_app.eval.reports. The filtered
leaderboard and the per-family / per-split bars are task-macro averages over the tasks that
pass the filters, as MedHEB's ID / held-out / all columns are (Table 4); the run-level figures
(accuracy vs CV, difficulty, relation gap, graded NDCG) come from medheb_app.eval.figures.
"""

from __future__ import annotations

import html
import logging
from typing import Any

import gradio as gr
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from medheb_app.eval import figures, reports
from medheb_app.eval.results import Summary
from medheb_app.services import Services
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
METRICS = ("hit@1", "mrr@5", "hit@5")
RANKED_SHOWN = 10


# ---------------------------------------------------------------- data


def run_choices(services: Services) -> list[tuple[str, int]]:
    """Finished runs, newest first, as (label, run id)."""
    from medheb_app.store.runs import list_runs

    return [
        (
            f"Run {run.id}: {run.suite} · {', '.join(run.models)} · {run.started:%Y-%m-%d %H:%M}",
            int(run.id),
        )
        for run in list_runs(services.store, limit=200)
        if run.status == "finished"
    ]


def load_summary(services: Services, run_id: int) -> Summary:
    """The Summary of a stored run, read from its out_dir."""
    from medheb_app.store.runs import Run

    with services.store.session() as session:
        run = session.get(Run, int(run_id))
        if run is None:
            raise KeyError(f"No run with id {run_id}.")
        out_dir = run.out_dir
    return Summary.from_disk(out_dir)


def task_frame(summary: Summary) -> pd.DataFrame:
    """One row per (model, task): the task's family, form, split and scores in percent."""
    forms = {task["name"]: task.get("form", "") for task in summary.tasks}
    rows = []
    for model, block in summary.models.items():
        for task, scores in block.tasks.items():
            rows.append(
                {
                    "model": model,
                    "task": task,
                    "family": scores["family"],
                    "form": forms.get(task, ""),
                    "split": scores["split"],
                    "graded": bool(scores["graded"]),
                    **{m: scores.get(m) for m in (*METRICS, "ndcg@5")},
                }
            )
    columns = ["model", "task", "family", "form", "split", "graded", *METRICS, "ndcg@5"]
    return pd.DataFrame(rows, columns=columns)


def filter_frame(
    frame: pd.DataFrame,
    families: list[str] | None = None,
    forms: list[str] | None = None,
    splits: list[str] | None = None,
    models: list[str] | None = None,
) -> pd.DataFrame:
    """Rows whose family, form, split and model are among the chosen (empty = all)."""
    mask = pd.Series(True, index=frame.index)
    for column, chosen in (
        ("family", families),
        ("form", forms),
        ("split", splits),
        ("model", models),
    ):
        if chosen:
            mask &= frame[column].isin(chosen)
    return frame[mask]


def leaderboard(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: task-macro Hit@1, MRR@5, Hit@5 over the single-positive tasks shown."""
    single = frame[~frame["graded"]]
    if single.empty:
        return pd.DataFrame(columns=["model", *METRICS, "tasks"])
    board = single.groupby("model")[list(METRICS)].mean().round(2)
    board["tasks"] = single.groupby("model")["task"].count()
    return board.sort_values("hit@1", ascending=False).reset_index()


# ---------------------------------------------------------------- figures


def _empty_figure(message: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    return figure


def grouped_figure(frame: pd.DataFrame, by: str, title: str) -> go.Figure:
    """Task-macro Hit@1 per model, grouped by `by` (family or split)."""
    single = frame[~frame["graded"]]
    if single.empty:
        return _empty_figure("No single-positive task matches the filters.")
    data = single.groupby([by, "model"], as_index=False)["hit@1"].mean()
    figure = px.bar(data, x=by, y="hit@1", color="model", barmode="group", title=title)
    figure.update_yaxes(title="Hit@1 (%)", range=[0, 100])
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


def _gold(record: dict[str, Any]) -> set[str]:
    if record.get("positives") is not None:
        return {str(p) for p in record["positives"]}
    gains = record.get("gains") or {}
    best = max(gains.values(), default=0)
    return {str(k) for k, v in gains.items() if v == best and v > 0}


def _snippet(payload: dict[str, Any], limit: int = 100) -> str:
    """A candidate's or query's text (shortened) or file name, as an HTML line."""
    text = payload.get("text")
    if not text:
        path = payload.get("image") or payload.get("volume")
        text = f"[{payload.get('form', 'image')}: {str(path).rsplit('/', 1)[-1]}]" if path else ""
    if not text:
        return ""
    text = str(text)
    short = text if len(text) <= limit else text[: limit - 1] + "…"
    return f'<div style="color:#555;font-size:.85em">{html.escape(short)}</div>'


def query_ids(summary: Summary, task: str | None) -> list[str]:
    """The query ids of a task, from the first model that ran it."""
    if not task:
        return []
    for model, block in summary.models.items():
        if task in block.tasks:
            return [str(q["id"]) for q in summary.task_run(model, task).queries]
    return []


def ranked_lists_html(
    summary: Summary, task: str | None, query_id: str | None, models: list[str]
) -> str:
    """Each chosen model's ranked list for one query, side by side, with the gold marked."""
    if not task or not query_id:
        return ui.notice_html("info", "Pick a task and a query.")
    columns = []
    for model in models:
        if model not in summary.models or task not in summary.models[model].tasks:
            continue
        run = summary.task_run(model, task)
        record = next((q for q in run.queries if str(q["id"]) == str(query_id)), None)
        if record is None:
            continue
        gold = _gold(record)
        scores = record.get("scores") or []
        items = []
        for rank, candidate in enumerate(record["ranked"][:RANKED_SHOWN]):
            score = f" · {scores[rank]:.3f}" if rank < len(scores) else ""
            mark = " <b>✓ GOLD</b>" if str(candidate) in gold else ""
            style = ' style="background:#dff3e4"' if mark else ""
            shown = _snippet(run.payloads.get(str(candidate), {}))
            items.append(f"<li{style}>{html.escape(str(candidate))}{score}{mark}{shown}</li>")
        found = [c for c in record["ranked"] if str(c) in gold]
        rank_note = (
            f"gold first at rank {record['ranked'].index(found[0]) + 1}"
            if found
            else f"gold not in the top {len(record['ranked'])}"
        )
        columns.append(
            f'<div style="flex:1;min-width:240px"><h4>{html.escape(model)}</h4>'
            f"<div>Hit@1 {100 * record.get('hit@1', 0):.0f} · MRR@5 "
            f"{record.get('mrr@5', 0):.2f} · {rank_note}</div><ol>{''.join(items)}</ol></div>"
        )
    if not columns:
        return ui.notice_html("warning", "No ranked list for this query in the chosen models.")
    query_note = _snippet(record.get("query") or {}, limit=400)
    gold_note = (
        f"<div><b>Query {html.escape(str(query_id))}</b>{query_note}</div>"
        f"<div>Gold: {html.escape(', '.join(sorted(_gold(record))))}</div>"
    )
    return f'{gold_note}<div style="display:flex;gap:16px;flex-wrap:wrap">{"".join(columns)}</div>'


# ---------------------------------------------------------------- layout


def _options(frame: pd.DataFrame, column: str) -> list[str]:
    return sorted(str(v) for v in frame[column].dropna().unique() if str(v))


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
    board = gr.Dataframe(label="Leaderboard (task-macro over the filtered tasks, %)")
    table4 = gr.Dataframe(label="MedHEB Table 4: Hit@1 (MRR@5) per family and split")
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
    gr.Markdown("### Drill down: task → query → ranked lists")
    with gr.Row():
        task = gr.Dropdown(label="Task", choices=[], elem_id="explorer-task")
        query = gr.Dropdown(label="Query", choices=[])
        compare_models = gr.Dropdown(label="Models to compare", choices=[], multiselect=True)
    ranked = gr.HTML(elem_id="explorer-ranked")
    summary_state = gr.State(None)

    def _load(run_id):
        try:
            summary = load_summary(services, run_id) if run_id is not None else None
        except Exception as error:
            log.exception("run %s unreadable", run_id)
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
        frame = task_frame(summary)
        names = list(summary.models)
        tasks = sorted(frame["task"].unique())
        return (
            summary,
            "",
            gr.update(choices=_options(frame, "family"), value=[]),
            gr.update(choices=_options(frame, "form"), value=[]),
            gr.update(choices=_options(frame, "split"), value=[]),
            gr.update(choices=names, value=[]),
            gr.update(choices=names, value=names[0]),
            gr.update(choices=names, value=names[-1]),
            gr.update(choices=tasks, value=tasks[0] if tasks else None),
            gr.update(choices=names, value=names[:2]),
            pd.DataFrame(reports.table4_rows(summary)),
        )

    def _views(summary, fam, frm, spl, mdl, mx, my):
        if summary is None:
            blank = _empty_figure("No run selected.")
            return None, *[blank] * 7
        frame = filter_frame(task_frame(summary), fam, frm, spl, mdl)
        return (
            leaderboard(frame),
            grouped_figure(frame, "family", "Hit@1 per family"),
            grouped_figure(frame, "split", "Hit@1: ID vs held-out source"),
            figures.accuracy_vs_balance(summary),
            figures.difficulty_buckets(summary),
            figures.relation_gap(summary),
            figures.graded_ndcg(summary),
            scatter_figure(frame, mx, my),
        )

    def _queries(summary, name):
        ids = query_ids(summary, name) if summary is not None else []
        return gr.update(choices=ids, value=ids[0] if ids else None)

    def _ranked(summary, name, qid, chosen, request: gr.Request):
        from medheb_app.ui.blinding import run_is_blinded

        if summary is None:
            return ""
        admin = auth is not None and auth.is_admin(request)
        if not admin and run_is_blinded(services, getattr(summary, "out_dir", None)):
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
    run.change(_load, [run], load_outputs, api_name=False).then(
        _views, view_inputs, view_outputs, api_name=False
    )
    for control in (families, forms, splits, models, model_x, model_y):
        # .input (user edits only): a run load sets all of them and redraws once, via .then
        control.input(_views, view_inputs, view_outputs, api_name=False)
    task.change(_queries, [summary_state, task], [query], api_name=False)
    for control in (query, compare_models):
        control.change(
            _ranked, [summary_state, task, query, compare_models], [ranked], api_name=False
        )

    def _refresh_runs(current=None):
        choices = run_choices(services)
        ids = [value for _, value in choices]
        return gr.update(choices=choices, value=current if current in ids else (ids or [None])[0])

    refresh.click(_refresh_runs, [run], [run], api_name=False)
    return {"run": run, "board": board, "ranked": ranked, "refresh_runs": _refresh_runs}
