"""CXR-Retrieve's paper tables from CxrRetrieveReports, as markdown (Tables 2, 3, 4, 5).

Pure functions of the reports, so a run reloaded from disk renders byte-for-byte the same
tables as the run that wrote it. Beyond the paper: the per-finding table (P@5 of "A" / of
"A and no B") and per-finding rows for the explorer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from medheb_app.eval.metrics import bootstrap_ci
from medheb_app.eval.results import CxrRetrieveReport
from medheb_app.tasks.cxr_retrieve import KINDS


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def table2(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 2 layout: per regime, per model P@1/3/5, R@3/5 and HNRR@5 (negation only)."""
    header = "| Model | P@1 | P@3 | P@5 | R@3 | R@5 | HNRR@5 ↓ |\n|---|---|---|---|---|---|---|"
    titles = {
        "single": 'Single ("A")',
        "pair": 'Pair ("A and B")',
        "negation": 'Negation ("A and no B")',
    }
    lines = [header]
    for kind in KINDS:
        lines.append(f"| **{titles[kind]}** | | | | | | |")
        for report in reports:
            m = report.regimes[kind]
            cells = [m["P@1"], m["P@3"], m["P@5"], m["R@3"], m["R@5"], m.get("HNRR@5")]
            lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def table3(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 3 layout: (a) negation P@k/R@k of the given (e.g. paraphrased) run, (b) HNRR@k."""
    lines = ["| Model | P@1 | P@3 | P@5 | R@3 | R@5 |", "|---|---|---|---|---|---|"]
    for report in reports:
        m = report.regimes["negation"]
        cells = [m["P@1"], m["P@3"], m["P@5"], m["R@3"], m["R@5"]]
        lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    lines += ["", "| Model | HNRR@1 ↓ | HNRR@3 ↓ | HNRR@5 ↓ |", "|---|---|---|---|"]
    for report in reports:
        m = report.regimes["negation"]
        cells = [m["HNRR@1"], m["HNRR@3"], m["HNRR@5"]]
        lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def table5(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 5 layout: negation P@1, P@5 and HNRR@5 under main and strict relevance."""
    lines = ["| Setting | Model | P@1 | P@5 | HNRR@5 ↓ |", "|---|---|---|---|---|"]
    for name, title in (("main", "Main"), ("strict", "Strict confirmed negative")):
        for report in reports:
            m = report.settings[name]["negation"]
            cells = [m["P@1"], m["P@5"], m["HNRR@5"]]
            lines.append(
                f"| {title} | {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |"
            )
    return "\n".join(lines)


def table4(rows: Sequence[tuple[str, str, CxrRetrieveReport]]) -> str:
    """Table 4 layout (ablations): (block, variant, report) -> P@5 per regime and HNRR@5."""
    lines = [
        "| Block | Variant | Single | Pair | Negation | HNRR@5 ↓ |",
        "|---|---|---|---|---|---|",
    ]
    for block, variant, report in rows:
        r = report.regimes
        cells = [
            r["single"]["P@5"],
            r["pair"]["P@5"],
            r["negation"]["P@5"],
            r["negation"]["HNRR@5"],
        ]
        lines.append(f"| {block} | {variant} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def p5_by_finding(report: Any, kind: str = "negation", setting: str = "main") -> dict[str, float]:
    """Mean P@5 (percent) of the `kind` queries per finding they require first: "A" for
    single, "A and no B" for negation. It shows which findings a model cannot retrieve."""
    rows: dict[str, list[float]] = {}
    for query in report.queries:
        if query["kind"] == kind:
            rows.setdefault(query["positives"][0], []).append(query[f"metrics_{setting}"]["P@5"])
    return {name: 100 * float(np.mean(values)) for name, values in rows.items()}


def finding_table(reports: Sequence[CxrRetrieveReport]) -> str:
    """Per finding A, per model: P@5 of "A" / mean P@5 of the nine "A and no B" queries."""
    findings = list(p5_by_finding(reports[0], "single", reports[0].setting))
    header = "| Finding (single / negation P@5) | " + " | ".join(r.model for r in reports) + " |"
    lines = [header, "|---" * (len(reports) + 1) + "|"]
    per_model = [
        (p5_by_finding(r, "single", r.setting), p5_by_finding(r, "negation", r.setting))
        for r in reports
    ]
    for name in findings:
        cells = [
            f"{_fmt(single.get(name))} / {_fmt(negation.get(name))}"
            for single, negation in per_model
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage_line(report: CxrRetrieveReport) -> str:
    """How many queries have no relevant image (kept, scoring 0, as the paper does)."""
    counts = report.without_relevant[report.setting]
    total = sum(counts.values())
    parts = ", ".join(f"{kind} {counts[kind]}" for kind in KINDS)
    return (
        f"{total} of 145 queries have no relevant image in this gallery ({report.setting} "
        f"setting: {parts}); they are kept and score 0, as in the paper."
    )


def render_tables(reports: Sequence[CxrRetrieveReport]) -> str:
    """What `cxr-retrieve eval` prints: the gallery, its label notes, coverage, Tables 2, 3
    and 5 and the per-finding table. Reads only the reports, so a reloaded run prints the
    same text byte-for-byte."""
    if not reports:
        raise ValueError("No CXR-Retrieve report to render.")
    first = reports[0]
    paraphrased = ", paraphrased negations" if first.paraphrase else ""
    lines = [
        f"CXR-Retrieve on {first.source} (split {first.split or 'all'}, {first.n_gallery} "
        f"images), {first.setting} setting{paraphrased}",
        *[f"note: {note}" for note in first.notes],
        coverage_line(first),
        "",
        "Table 2 layout:",
        table2(reports),
        "",
        "Table 3 layout (negation" + (", paraphrased" if first.paraphrase else "") + "):",
        table3(reports),
        "",
        "Table 5 layout (same ranking, both relevance settings):",
        table5(reports),
        "",
        "Per finding A (beyond the paper): P@5 of 'A' / mean P@5 of the 'A and no B' queries:",
        finding_table(reports),
    ]
    return "\n".join(lines)


def finding_rows(report: CxrRetrieveReport) -> list[dict[str, Any]]:
    """Per finding A: P@5 of "A" and mean P@5 / HNRR@5 of the nine "A and no B" queries
    (chosen setting, percent) -- the explorer's per-finding table of a run."""
    single = p5_by_finding(report, "single", report.setting)
    negation = p5_by_finding(report, "negation", report.setting)
    hnrr: dict[str, list[float]] = {}
    for query in report.queries:
        if query["kind"] == "negation":
            value = query[f"metrics_{report.setting}"]["HNRR@5"]
            hnrr.setdefault(query["positives"][0], []).append(value)
    return [
        {
            "finding": name,
            "single P@5": round(single[name], 1),
            "negation P@5": round(negation.get(name, float("nan")), 1),
            "negation HNRR@5": round(100 * float(np.mean(hnrr.get(name, [np.nan]))), 1),
        }
        for name in single
    ]


def leaderboard_rows(reports: Sequence[CxrRetrieveReport]) -> list[dict[str, Any]]:
    """Per model: P@1 / P@5 per regime and negation HNRR@5 (chosen setting, percent), with a
    95% bootstrap CI over the negation queries' P@5."""
    rows = []
    for report in reports:
        row: dict[str, Any] = {"model": report.model}
        for kind in KINDS:
            row[f"{kind} P@1"] = round(report.regimes[kind]["P@1"], 1)
            row[f"{kind} P@5"] = round(report.regimes[kind]["P@5"], 1)
        row["negation HNRR@5 ↓"] = round(report.regimes["negation"]["HNRR@5"], 1)
        values = [
            q[f"metrics_{report.setting}"]["P@5"] for q in report.queries if q["kind"] == "negation"
        ]
        _, low, high = bootstrap_ci(values)
        row["negation P@5 95% CI"] = f"[{100 * low:.1f}, {100 * high:.1f}]"
        rows.append(row)
    return rows


def finding_table_rows(reports: Sequence[CxrRetrieveReport]) -> list[dict[str, Any]]:
    """Per finding A, per model: 'P@5 of "A" / mean P@5 of "A and no B"' (chosen setting)."""
    per_model = {
        r.model: (p5_by_finding(r, "single", r.setting), p5_by_finding(r, "negation", r.setting))
        for r in reports
    }
    findings = list(next(iter(per_model.values()))[0]) if per_model else []
    return [
        {
            "finding (single / negation P@5)": name,
            **{
                model: f"{_fmt(single.get(name))} / {_fmt(negation.get(name))}"
                for model, (single, negation) in per_model.items()
            },
        }
        for name in findings
    ]
