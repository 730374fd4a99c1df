"""MedHEB's and CXR-Retrieve's figures as plotly Figure objects (the UI shows them).

Family profile (Figure 6A), accuracy vs balance (Figure 6C), difficulty buckets (Figure 4A),
established vs under-explored relations (Figure 4B), graded NDCG@5 (Table 5) and CXR-Retrieve
P@5 per regime. Each function reads only a run Summary, through the row builders of reports.py.

Two rules every chart keeps: a model has one colour in every chart (`model_colours`, by its
name), and the baselines are not bars: random is drawn as a dashed floor mark and oracle as a
ceiling mark over each group (`add_bounds`), so the ceiling does not flatten the models.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import plotly.graph_objects as go

from medheb_app.eval import reports
from medheb_app.eval.results import Summary

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#393b79",
)
BOUND_STYLE = {
    "random": {"color": "#6b7280", "dash": "dash", "label": "random (floor)"},
    "oracle": {"color": "#111827", "dash": "solid", "label": "oracle (ceiling)"},
}


def model_colour(name: str) -> str:
    """The model's colour in every chart of every run: chosen by a hash of its name."""
    if name in BOUND_STYLE:
        return BOUND_STYLE[name]["color"]
    digest = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    return PALETTE[digest % len(PALETTE)]


def model_colours(names: Iterable[str]) -> dict[str, str]:
    return {name: model_colour(name) for name in names}


def add_bounds(
    figure: go.Figure, x: Sequence[str], bounds: dict[str, Sequence[float | None]]
) -> None:
    """Floor (random) and ceiling (oracle) as wide horizontal marks over each x group."""
    for name, values in bounds.items():
        style = BOUND_STYLE.get(name, {"color": "#111827", "dash": "dot", "label": name})
        figure.add_scatter(
            name=style["label"],
            x=list(x),
            y=list(values),
            mode="markers",
            marker={
                "symbol": "line-ew",
                "size": 46,
                "line": {"width": 3, "color": style["color"]},
            },
            hovertemplate=f"{style['label']}: %{{y:.1f}}<extra></extra>",
        )


def _split_baselines(names: Iterable[str]) -> tuple[list[str], list[str]]:
    names = list(names)
    return [n for n in names if n not in BOUND_STYLE], [n for n in names if n in BOUND_STYLE]


LAYOUT = {"template": "plotly_white", "height": 420, "margin": {"l": 60, "r": 20, "t": 60, "b": 60}}


def _figure(title: str, **axes: str) -> go.Figure:
    figure = go.Figure()
    figure.update_layout(title=title, **LAYOUT)
    if "x" in axes:
        figure.update_xaxes(title=axes["x"])
    if "y" in axes:
        figure.update_yaxes(title=axes["y"])
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
        marker={"size": 12, "color": [model_colour(n) for n, _ in points]},
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
            line={"color": model_colour(row["model"])},
        )
    return figure


def graded_ndcg(summary: Summary) -> go.Figure:
    """NDCG@5 per graded relation and overall (MedHEB Table 5)."""
    figure = _figure("Graded relevance", x="relation", y="NDCG@5 (%)")
    real, bounds = _split_baselines(summary.models)
    relations = list(dict.fromkeys(r for model in summary.models.values() for r in model.graded))
    for name in real:
        graded = summary.models[name].graded
        figure.add_bar(
            name=name,
            marker_color=model_colour(name),
            x=relations,
            y=[graded.get(r, {}).get("ndcg@5") for r in relations],
        )
    add_bounds(
        figure,
        relations,
        {
            name: [summary.models[name].graded.get(r, {}).get("ndcg@5") for r in relations]
            for name in bounds
        },
    )
    figure.update_layout(barmode="group")
    return figure


def cxr_regimes(
    summary: Summary, metric: str = "P@5", kinds: Sequence[str] = ("single", "pair", "negation")
) -> go.Figure:
    """A CXR-Retrieve run: `metric` per query regime, one bar per model, baselines as marks."""
    figure = _figure(f"CXR-Retrieve {metric} per regime", x="regime", y=f"{metric} (%)")
    real, bounds = _split_baselines(summary.models)

    def values(name: str) -> list[float | None]:
        flat = summary.models[name].tasks.get("cxr-retrieve", {})
        return [flat.get(f"{kind}/{metric}") for kind in kinds]

    for name in real:
        figure.add_bar(name=name, marker_color=model_colour(name), x=list(kinds), y=values(name))
    add_bounds(figure, list(kinds), {name: values(name) for name in bounds})
    figure.update_layout(barmode="group")
    return figure
