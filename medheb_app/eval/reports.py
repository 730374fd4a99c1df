"""MedHEB's tables from a run Summary: row builders (data) and a markdown renderer.

Table 4 (Hit@1 with MRR@5 in brackets per family, ID / held-out-source / all), Table 7 (mu,
sigma, CV of family Hit@1), Table 8 (Hit@5), Table 5 (graded NDCG@5 by relation), the
difficulty buckets of Figure 4A and the established-vs-underexplored gap of Figure 4B.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from medheb_app.eval import metrics
from medheb_app.eval.results import Summary
from medheb_app.models.baselines import BASELINES
from medheb_app.tasks.base import ESTABLISHED_FAMILIES, FAMILIES, UNDEREXPLORED_FAMILIES

SPLITS: tuple[str, ...] = ("ID", "held-out-source", "all")
SPLIT_LABELS = {"ID": "ID", "held-out-source": "Held-out", "all": "All"}
# MedHEB section 5.3 / Figure 4A, on the baseline mean Hit@1 in percent: [low, high).
DIFFICULTY_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("Collapse", 0.0, 3.0),
    ("Weak", 3.0, 10.0),
    ("Medium", 10.0, 30.0),
    ("Tractable", 30.0, float("inf")),
)
NOT_MODELS = ("oracle",)
DASH = "–"


def families_present(summary: Summary) -> list[str]:
    """Families with at least one single-positive task in this run, in the paper's order."""
    seen = {task["family"] for task in summary.tasks if not task["graded"]}
    return [family for family in FAMILIES if family in seen]


def _fmt(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def family_split_rows(
    summary: Summary, cell: Callable[[dict[str, Any] | None], str]
) -> list[dict[str, Any]]:
    """Per model: `cell(block)` of each family present, then of each split (a block is None
    where the model has no task there): the layout of MedHEB Tables 4 and 8."""
    rows = []
    for name, model in summary.models.items():
        row: dict[str, Any] = {"model": name}
        for family in families_present(summary):
            row[family] = cell(model.families.get(family))
        for split in SPLITS:
            row[SPLIT_LABELS[split]] = cell(model.splits.get(split))
        rows.append(row)
    return rows


def table4_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per model: 'Hit@1 (MRR@5)' per family and split, as in MedHEB Table 4."""
    return family_split_rows(
        summary,
        lambda block: f"{block['hit@1']:.2f} ({block['mrr@5']:.2f})" if block else DASH,
    )


def table7_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per model: mu, sigma and CV of family-level Hit@1, then the family Hit@1 scores."""
    rows = []
    for name, model in summary.models.items():
        row: dict[str, Any] = {
            "model": name,
            "mu": _fmt(model.consistency.get("mu")),
            "sigma": _fmt(model.consistency.get("sigma")),
            "CV": f"{model.consistency['cv']:.3f}" if model.consistency else DASH,
        }
        for family in families_present(summary):
            block = model.families.get(family)
            row[family] = _fmt(block["hit@1"] if block else None)
        rows.append(row)
    return rows


def table8_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per model: task-macro Hit@5 per family and split (MedHEB Table 8)."""
    return family_split_rows(summary, lambda block: _fmt(block["hit@5"] if block else None))


def table5_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per model: graded NDCG@5 per relation and over all graded tasks (MedHEB Table 5)."""
    relations = sorted(
        {task["relation"] for task in summary.tasks if task["graded"]}, key=lambda r: r
    )
    if not relations:
        return []
    rows = []
    for name, model in summary.models.items():
        row: dict[str, Any] = {"model": name}
        for relation in [*relations, "all"]:
            block = model.graded.get(relation)
            row[relation.capitalize() if relation != "all" else "All"] = _fmt(
                block["ndcg@5"] if block else None
            )
        rows.append(row)
    return rows


def reference_models(summary: Summary) -> list[str]:
    """Models whose mean defines task difficulty: real models, else every model but oracle."""
    real = [name for name in summary.models if name not in BASELINES]
    return real or [name for name in summary.models if name not in NOT_MODELS]


def bucket_of(hit1_percent: float) -> str:
    for name, low, high in DIFFICULTY_BUCKETS:
        if low <= hit1_percent < high:
            return name
    raise ValueError(f"Hit@1 must be a percentage >= 0; got {hit1_percent}.")


def difficulty_rows(summary: Summary) -> list[dict[str, Any]]:
    """Each single-positive task with the reference models' mean Hit@1 and its bucket."""
    models = reference_models(summary)
    rows = []
    for task in summary.tasks:
        if task["graded"]:
            continue
        scores = [
            summary.models[m].tasks[task["name"]]["hit@1"]
            for m in models
            if task["name"] in summary.models[m].tasks
        ]
        if not scores:
            continue
        mean = float(np.mean(scores))
        rows.append(
            {
                "task": task["name"],
                "family": task["family"],
                "mean_hit@1": round(mean, 2),
                "between_model_sd": round(float(np.std(scores)), 2),
                "bucket": bucket_of(mean),
            }
        )
    return rows


def bucket_counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {name: sum(r["bucket"] == name for r in rows) for name, _, _ in DIFFICULTY_BUCKETS}


def gap_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per model: mean family Hit@1 over established vs under-explored families (Fig. 4B)."""
    rows = []
    for name, model in summary.models.items():
        established = [
            model.families[f]["hit@1"] for f in ESTABLISHED_FAMILIES if f in model.families
        ]
        under = [model.families[f]["hit@1"] for f in UNDEREXPLORED_FAMILIES if f in model.families]
        if not established or not under:
            continue
        e, u = float(np.mean(established)), float(np.mean(under))
        rows.append(
            {
                "model": name,
                "established": round(e, 2),
                "underexplored": round(u, 2),
                "gap": round(e - u, 2),
            }
        )
    return rows


def task_rows(summary: Summary) -> list[dict[str, Any]]:
    """One row per task: its shape and every model's main metric."""
    rows = []
    for task in summary.tasks:
        metric = "ndcg@5" if task["graded"] else "hit@1"
        row: dict[str, Any] = {
            "task": task["name"],
            "family": task["family"],
            "split": task["split"],
            "source": task["source"],
            "queries": task["n_queries"],
            "candidates": task["n_candidates"],
            "metric": metric.replace("hit", "Hit").replace("ndcg", "NDCG"),
        }
        for name, model in summary.models.items():
            row[name] = (
                _fmt(model.tasks[task["name"]][metric]) if task["name"] in model.tasks else DASH
            )
        rows.append(row)
    return rows


def comparison_rows(
    summary: Summary, model_a: str, model_b: str, n_boot: int = 1000, seed: int = 0
) -> list[dict[str, Any]]:
    """Per task: Hit@1 (NDCG@5 for graded) of a and b, their difference with a 95% paired
    bootstrap CI over the task's queries, and the two-sided p-value."""
    rows = []
    for task in summary.tasks:
        name = task["name"]
        if name not in summary.models[model_a].tasks or name not in summary.models[model_b].tasks:
            continue
        metric = "ndcg@5" if task["graded"] else "hit@1"
        a = [q[metric] for q in summary.task_run(model_a, name).queries]
        b = [q[metric] for q in summary.task_run(model_b, name).queries]
        diff, (low, high), p_value = metrics.paired_bootstrap_test(a, b, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "task": name,
                "metric": metric,
                model_a: _fmt(100 * float(np.mean(a))),
                model_b: _fmt(100 * float(np.mean(b))),
                "diff": _fmt(100 * diff),
                "95% CI": f"[{100 * low:.1f}, {100 * high:.1f}]",
                "p": f"{p_value:.3f}",
            }
        )
    return rows


def hit1_ci(
    summary: Summary, model: str, tasks: Sequence[str], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float, float] | None:
    """(task-macro Hit@1, low, high) in percent over `tasks`, queries resampled within each task
    (95% stratified bootstrap); None when the model ran none of them."""
    block = summary.models.get(model)
    if block is None:
        return None
    groups = [
        [float(q["hit@1"]) for q in summary.task_run(model, task).queries]
        for task in tasks
        if task in block.tasks
    ]
    if not groups:
        return None
    mean, low, high = metrics.stratified_bootstrap_ci(groups, n_boot=n_boot, seed=seed)
    return 100 * mean, 100 * low, 100 * high


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows of equal keys as a GitHub markdown table ('' when there are none)."""
    if not rows:
        return ""
    headers = list(rows[0])
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(str(row.get(h, DASH)) for h in headers) + " |" for row in rows]
    return "\n".join(lines)


def render_cxr_report(summary: Summary) -> str:
    """A cxr-retrieve run as markdown: provenance, then the tables `cxr-retrieve eval` prints,
    read from the run's per-model report files."""
    # deferred: pandas
    from medheb_app.eval.cxr_tables import render_tables

    reports = [summary.cxr_report(model) for model in summary.models]
    notes = [f"- **{name}**: {model.note}" for name, model in summary.models.items() if model.note]
    parts = [
        "# CXR-Retrieve results",
        f"Run {summary.started} -> {summary.finished}, code {summary.code_version}, "
        f"models: {', '.join(summary.models)}.",
        *(["", *notes] if notes else []),
        "",
        "```",
        render_tables(reports),
        "```",
    ]
    return "\n".join(parts) + "\n"


def render_report(summary: Summary) -> str:
    """The run as markdown: provenance, Tables 4 / 7 / 8 / 5, difficulty, gap and per task
    (MedHEB runs), or CXR-Retrieve's Tables 2 / 3 / 5 and per-finding table."""
    if summary.kind == "cxr-retrieve":
        return render_cxr_report(summary)
    parts = [
        f"# MedHEB results: suite `{summary.suite}`",
        f"Run {summary.started} -> {summary.finished}, code {summary.code_version}, "
        f"{len(summary.tasks)} tasks, models: {', '.join(summary.models)}.",
    ]
    synthetic = [t["name"] for t in summary.tasks if t.get("synthetic")]
    if synthetic:
        parts.append(
            f"{len(synthetic)} of {len(summary.tasks)} tasks use synthetic phantom data "
            "(tasks whose source starts with 'phantom')."
        )
    notes = [f"- **{name}**: {model.note}" for name, model in summary.models.items() if model.note]
    if notes:
        parts += ["", *notes]
    parts += [
        "",
        "## Table 4: Hit@1 (MRR@5), %, task-macro per family and split",
        markdown_table(table4_rows(summary)),
        "",
        "## Table 7: cross-family consistency (mu, sigma, CV of family Hit@1)",
        markdown_table(table7_rows(summary)),
        "",
        "## Table 8: Hit@5, %",
        markdown_table(table8_rows(summary)),
    ]
    graded = table5_rows(summary)
    if graded:
        parts += ["", "## Table 5: graded relevance, NDCG@5, %", markdown_table(graded)]
    difficulty = difficulty_rows(summary)
    if difficulty:
        counts = bucket_counts(difficulty)
        parts += [
            "",
            "## Task difficulty (mean Hit@1 of " + ", ".join(reference_models(summary)) + ")",
            ", ".join(f"{name}: {n}" for name, n in counts.items()),
            "",
            markdown_table(difficulty),
        ]
    gap = gap_rows(summary)
    if gap:
        parts += [
            "",
            "## Established (I-I, I-Lab, I-Rep, T-I, T-T) vs under-explored (MB-VR, VG) Hit@1",
            markdown_table(gap),
        ]
    parts += ["", "## Per task (main metric, %)", markdown_table(task_rows(summary))]
    compared = [name for name in summary.models if name not in NOT_MODELS]
    if len(compared) >= 2:
        a, b = compared[0], compared[1]
        parts += [
            "",
            f"## {a} vs {b}: paired bootstrap over each task's queries (1,000 resamples)",
            markdown_table(comparison_rows(summary, a, b)),
        ]
    if summary.skipped:
        parts += ["", "## Skipped", *[f"- {name}: {why}" for name, why in summary.skipped.items()]]
    return "\n".join(parts) + "\n"
