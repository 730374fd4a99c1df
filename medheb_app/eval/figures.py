"""MedHEB's and CXR-Retrieve's figures as plotly Figure objects (the UI shows them).

Accuracy vs balance (Figure 6C), difficulty buckets (Figure 4A), established vs under-explored
relations (Figure 4B), graded NDCG@5 (Table 5) and CXR-Retrieve P@5 per regime. Each function
reads only a run Summary, through the row builders of reports.py. The family and split
profiles (Figure 6A) are drawn by the explorer from its filtered task table
(ui/explorer_tab.grouped_figure), with the same colours and bounds (`model_colours`,
`add_bounds`).

Two rules every chart keeps: a model has one colour in every chart, distinct from every other
model of the run (eval.colours: a colour-blind-safe palette whose slots the store records; the
UI passes them in as `colours`), and the baselines are not bars: random is drawn as a grey
dashed floor mark and oracle as a grey ceiling mark over each group (`add_bounds`), so the
ceiling does not flatten the models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import plotly.graph_objects as go

from medheb_app.eval import reports
from medheb_app.eval.colours import BOUND_STYLE, run_colours
from medheb_app.eval.results import Summary

Colours = Mapping[str, str]


def model_colours(names: Iterable[str], slots: Mapping[str, int] | None = None) -> Colours:
    """Distinct colours for the models `names` (eval.colours.run_colours); the UI passes the
    slots recorded in the store, so a model keeps its colour across runs."""
    return run_colours(list(names), slots)


def _palette(summary: Summary, colours: Colours | None) -> Colours:
    """The caller's colours when they cover every model of the run, else the run's own
    distinct colours (shipped models first, then the run's order)."""
    if colours is not None and all(name in colours for name in summary.models):
        return colours
    return run_colours(list(summary.models))


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


def accuracy_vs_balance(summary: Summary, colours: Colours | None = None) -> go.Figure:
    """Mean family Hit@1 against cross-family CV, one point per model (MedHEB Figure 6C)."""
    palette = _palette(summary, colours)
    figure = _figure("Accuracy vs balance", x="mean family Hit@1 (%)", y="CV (lower = more even)")
    points = [(n, m.consistency) for n, m in summary.models.items() if m.consistency]
    figure.add_scatter(
        x=[c["mu"] for _, c in points],
        y=[c["cv"] for _, c in points],
        text=[n for n, _ in points],
        mode="markers+text",
        textposition="top center",
        marker={"size": 12, "color": [palette[n] for n, _ in points]},
        showlegend=False,
    )
    return figure


def difficulty_buckets(summary: Summary, colours: Colours | None = None) -> go.Figure:
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


def relation_gap(summary: Summary, colours: Colours | None = None) -> go.Figure:
    """Established vs under-explored family Hit@1, one line per model (MedHEB Figure 4B)."""
    palette = _palette(summary, colours)
    figure = _figure("Established vs under-explored relations", y="mean family Hit@1 (%)")
    for row in reports.gap_rows(summary):
        figure.add_scatter(
            name=f"{row['model']} (gap {row['gap']:.1f})",
            x=["established", "under-explored"],
            y=[row["established"], row["underexplored"]],
            mode="lines+markers",
            line={"color": palette[row["model"]]},
        )
    return figure


def graded_ndcg(summary: Summary, colours: Colours | None = None) -> go.Figure:
    """NDCG@5 per graded relation and overall (MedHEB Table 5)."""
    palette = _palette(summary, colours)
    figure = _figure("Graded relevance", x="relation", y="NDCG@5 (%)")
    real, bounds = _split_baselines(summary.models)
    relations = list(dict.fromkeys(r for model in summary.models.values() for r in model.graded))
    for name in real:
        graded = summary.models[name].graded
        figure.add_bar(
            name=name,
            marker_color=palette[name],
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
    summary: Summary,
    metric: str = "P@5",
    kinds: Sequence[str] = ("single", "pair", "negation"),
    colours: Colours | None = None,
) -> go.Figure:
    """A CXR-Retrieve run: `metric` per query regime, one bar per model, baselines as marks."""
    palette = _palette(summary, colours)
    figure = _figure(f"CXR-Retrieve {metric} per regime", x="regime", y=f"{metric} (%)")
    real, bounds = _split_baselines(summary.models)

    def values(name: str) -> list[float | None]:
        flat = summary.models[name].tasks.get("cxr-retrieve", {})
        return [flat.get(f"{kind}/{metric}") for kind in kinds]

    for name in real:
        figure.add_bar(name=name, marker_color=palette[name], x=list(kinds), y=values(name))
    add_bounds(figure, list(kinds), {name: values(name) for name in bounds})
    figure.update_layout(barmode="group")
    return figure
