"""`python -m medheb_app cxr-retrieve eval ...`: the CXR-Retrieve benchmark.

Training and the Table 4 ablations live under `train label-aware` and `train ablations`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.ranking.views import DEFAULT_VIEWS, VIEW_SETS
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cxr-retrieve",
        help="compositional chest X-ray retrieval benchmark (145 queries)",
        description="CXR-Retrieve: single, pair and negation queries over labelled radiographs.",
    )
    commands = parser.add_subparsers(dest="cxr_command", required=True)

    run = commands.add_parser(
        "eval",
        help="rank a gallery for the 145 queries and score P@k, R@k, HNRR@k",
        description="Repeat --model to compare models on one gallery in one run. A spec is any "
        "embedder spec (dual-lite, dual-lite@label-aware, random, oracle, open_clip:...) or "
        "logic:<spec> for the logic-aware ranker over that embedder.",
    )
    run.add_argument("--model", action="append", required=True, help="model spec (repeatable)")
    run.add_argument("--data", default="phantom", help="phantom | nih:PATH | mimic:PATH")
    run.add_argument("--setting", choices=("main", "strict"), default="main")
    run.add_argument("--paraphrase", action="store_true", help="'an image with A but without B'")
    run.add_argument("--split", default="test", help="gallery split (default test; 'all')")
    run.add_argument("--out", required=True, help="JSON file for scores and every top 10")
    run.add_argument(
        "--probe-views",
        choices=tuple(VIEW_SETS),
        default=DEFAULT_VIEWS,
        help="what logic: rankers' probes read besides the whole image: zoomed-crop grids "
        f"(default {DEFAULT_VIEWS}, chosen on val; 2x2 embeds 2.8x fewer views)",
    )
    add_json_flag(run)
    run.set_defaults(handler=run_eval)


def run_eval(args: argparse.Namespace, settings: Settings) -> tuple[str, Any]:
    """A thin front over the runner's cxr-retrieve suite: same evaluation, printed as the
    paper's tables, the reports written to one JSON file (`load_cxr_reports` reads it back).
    Not recorded in the store; `bench run --suite cxr-retrieve` is the stored, browsable run."""
    # deferred: pandas
    from medheb_app.eval.cxr_tables import render_tables
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

    try:
        suite = CxrRetrieveSuite.from_options(
            args.data, args.split, args.setting, args.paraphrase, args.probe_views
        )
    except ValueError as error:
        raise UserError(str(error)) from None
    started = time.perf_counter()
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="cxr-retrieve-") as scratch:
        summary = run_suite(suite, args.model, Path(scratch), settings, record=False)
        reports = [summary.cxr_report(model) for model in summary.models]
    payload: dict[str, Any] = (
        reports[0].to_json() if len(reports) == 1 else {"runs": [r.to_json() for r in reports]}
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    lines = [
        render_tables(reports),
        "",
        "time: "
        + ", ".join(f"{r.model} {r.timing_s['total']:.1f} s" for r in reports)
        + f"; total {time.perf_counter() - started:.1f} s",
        f"wrote {out}",
    ]
    return "\n".join(lines), payload
