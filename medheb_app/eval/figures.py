"""MedHEB's figures as plotly Figure objects (the UI shows them; scripts can write them).

Family profile (Figure 6A), accuracy vs balance (Figure 6C), difficulty buckets (Figure 4A),
established vs under-explored relations (Figure 4B) and graded NDCG@5 (Table 5). Each
function reads only a run Summary, through the row builders of reports.py.
"""

from __future__ import annotations

import plotly.graph_objects as go

from medheb_app.eval import reports
from medheb_app.eval.results import Summary

LAYOUT = {"template": "plotly_white", "height": 420, "margin": {"l": 60, "r": 20, "t": 60, "b": 60}}


def _figure(title: str, **axes: str) -> go.Figure:
    figure = go.Figure()
    figure.update_layout(title=title, **LAYOUT)
    if "x" in axes:
        figure.update_xaxes(title=axes["x"])
    if "y" in axes:
        figure.update_yaxes(title=axes["y"])
    return figure


def family_profile(summary: Summary, metric: str = "hit@1") -> go.Figure:
    """Grouped bars: each model's task-macro `metric` per family (MedHEB Figure 6A)."""
    families = reports.families_present(summary)
    figure = _figure(f"{metric} per retrieval family", x="family", y=f"{metric} (%)")
    for name, model in summary.models.items():
        figure.add_bar(
            name=name,
            x=families,
            y=[model.families[f][metric] if f in model.families else None for f in families],
        )
    figure.update_layout(barmode="group")
    return figure


def split_profile(summary: Summary, metric: str = "hit@1") -> go.Figure:
    """Grouped bars over ID, held-out-source and all tasks."""
    splits = [s for s in reports.SPLITS if any(s in m.splits for m in summary.models.values())]
    figure = _figure(f"{metric} by split", x="split", y=f"{metric} (%)")
    for name, model in summary.models.items():
        figure.add_bar(
            name=name,
            x=[reports.SPLIT_LABELS[s] for s in splits],
            y=[model.splits[s][metric] if s in model.splits else None for s in splits],
        )
    figure.update_layout(barmode="group")
    return figure


def accuracy_vs_balance(summary: Summary) -> go.Figure:
    """Mean family Hit@1 against cross-family CV, one point per model (MedHEB Figure 6C)."""
    figure = _figure("Accuracy vs balance", x="mean family Hit@1 (%)", y="CV (lower = more even)")
    points = [(n, m.consistency) for n, m in summary.models.items() if m.consistency]
    figure.add_scatter(
        x=[c["mu"] for _, c in points],
        y=[c["cv"] for _, c in points],
        text=[n for n, _ in points],
        mode="markers+text",
        textposition="top center",
        marker={"size": 12},
        showlegend=False,
    )
    return figure


def difficulty_buckets(summary: Summary) -> go.Figure:
    """Task counts per difficulty bucket with the mean between-model SD (MedHEB Figure 4A)."""
    rows = reports.difficulty_rows(summary)
    counts = reports.bucket_counts(rows)
    names = list(counts)
    spread = []
    for name in names:
        sds = [r["between_model_sd"] for r in rows if r["bucket"] == name]
        spread.append(f"SD {sum(sds) / len(sds):.1f}" if sds else "")
    models = ", ".join(reports.reference_models(summary))
    figure = _figure(f"Task difficulty (mean Hit@1 of {models})", x="bucket", y="tasks")
    figure.add_bar(x=names, y=[counts[n] for n in names], text=spread, showlegend=False)
    return figure


def relation_gap(summary: Summary) -> go.Figure:
    """Established vs under-explored family Hit@1, one line per model (MedHEB Figure 4B)."""
    figure = _figure("Established vs under-explored relations", y="mean family Hit@1 (%)")
    for row in reports.gap_rows(summary):
        figure.add_scatter(
            name=f"{row['model']} (gap {row['gap']:.1f})",
            x=["established", "under-explored"],
            y=[row["established"], row["underexplored"]],
            mode="lines+markers",
        )
    return figure


def graded_ndcg(summary: Summary) -> go.Figure:
    """NDCG@5 per graded relation and overall (MedHEB Table 5)."""
    figure = _figure("Graded relevance", x="relation", y="NDCG@5 (%)")
    for name, model in summary.models.items():
        relations = list(model.graded)
        figure.add_bar(name=name, x=relations, y=[model.graded[r]["ndcg@5"] for r in relations])
    figure.update_layout(barmode="group")
    return figure


FIGURES = {
    "family": family_profile,
    "split": split_profile,
    "balance": accuracy_vs_balance,
    "difficulty": difficulty_buckets,
    "gap": relation_gap,
    "graded": graded_ndcg,
}
