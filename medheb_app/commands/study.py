"""`python -m medheb_app study ...`: create, list, export and analyse blinded preference studies
(MedHEB section 5.6). Raters vote in the web app; these commands are the admin's side."""

from __future__ import annotations

import argparse
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("study", help="blinded two-model preference studies")
    actions = parser.add_subparsers(dest="study_command", required=True)

    create = actions.add_parser("create", help="sample items from a benchmark run directory")
    create.add_argument("--run", required=True, help="a `bench run --out` directory")
    create.add_argument(
        "--model", action="append", required=True, help="model spec to compare (2 or more)"
    )
    create.add_argument(
        "--n", type=int, required=True, help="queries to sample, stratified across tasks"
    )
    create.add_argument("--raters", type=int, default=1, help="raters per item (default 1)")
    create.add_argument("--name", required=True, help="a unique study name")
    create.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    create.add_argument(
        "--no-reveal", action="store_true", help="never show model names after a vote"
    )
    create.add_argument(
        "--payloads",
        choices=("auto", "tasks", "none"),
        default="auto",
        help="what raters see for each id: 'tasks' rebuilds the run's suite tasks and shows "
        "their texts and images (PNGs in DATA_DIR/study-media), 'none' the bare ids, 'auto' "
        "(default) tasks when the run folder has a summary.json",
    )
    add_json_flag(create)
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="studies with their item and vote counts")
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)

    export = actions.add_parser("export", help="write the votes in force to a CSV file")
    export.add_argument("--out", required=True, help="CSV file to write")
    export.add_argument("--study", default=None, help="study name or id (default: all)")
    add_json_flag(export)
    export.set_defaults(handler=run_export)

    analyse = actions.add_parser(
        "analyse", aliases=["analyze"], help="preference rates, Bradley-Terry, agreement, bias"
    )
    analyse.add_argument("--study", default=None, help="study name or id (default: all)")
    analyse.add_argument("--boot", type=int, default=200, help="bootstrap resamples (200)")
    analyse.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_json_flag(analyse)
    analyse.set_defaults(handler=run_analyse)


def _store(settings: Settings):
    from medheb_app.store.db import Store

    return Store.open(settings.database_url)


def run_create(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    from medheb_app.study import create_study, list_studies

    if args.n < 1:
        raise UserError(f"--n must be at least 1; got {args.n}.")
    store = _store(settings)
    describe = _describer(args.payloads, args.run, settings)
    study_id = create_study(
        store,
        args.name,
        args.model,
        args.run,
        n_items=args.n,
        raters_per_item=args.raters,
        reveal_after_vote=not args.no_reveal,
        seed=args.seed,
        describe=describe,
    )
    study = next(s for s in list_studies(store) if s["id"] == study_id)
    human = (
        f"Created study '{study['name']}' (id {study_id}): {study['n_items']} items comparing "
        f"{', '.join(study['models'])}, {args.raters} rater(s) per item."
    )
    return human, study


def _describer(kind: str, run_dir: str, settings: Settings):
    """The display-payload source for `study create --payloads`."""
    import json
    from pathlib import Path

    summary_path = Path(run_dir) / "summary.json"
    if kind == "none" or (kind == "auto" and not summary_path.is_file()):
        return None
    if not summary_path.is_file():
        raise UserError(f"{summary_path} not found; --payloads tasks needs a `bench run` folder.")
    from medheb_app.study.payloads import describe_with_tasks
    from medheb_app.tasks.medheb import get_suite

    summary = json.loads(summary_path.read_text())
    names = [task["name"] for task in summary.get("tasks", [])]
    tasks, _skipped = get_suite(summary["suite"]).build(settings, only=names or None)
    return describe_with_tasks(tasks, settings.data_dir / "study-media")


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    from medheb_app.study import list_studies

    studies = list_studies(_store(settings))
    lines = [
        f"{s['id']:>3}  {s['name']}  items={s['n_items']}  votes={s['votes']}  "
        f"raters/item={s['raters_per_item']}  models={', '.join(s['models'])}"
        for s in studies
    ]
    return "\n".join(lines) or "No studies yet (create one with `study create`).", {
        "studies": studies
    }


def run_export(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    from medheb_app.study.export import export_csv

    rows = export_csv(_store(settings), args.out, args.study)
    return f"Wrote {rows} vote(s) to {args.out}.", {"out": str(args.out), "rows": rows}


def run_analyse(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    from medheb_app.study.analysis import summarise
    from medheb_app.study.export import votes_frame

    if args.boot < 0:
        raise UserError(f"--boot must be 0 or more; got {args.boot}.")
    summary = summarise(votes_frame(_store(settings), args.study), args.boot, args.seed)
    return format_summary(summary), summary


def _pct(value: float | None) -> str:
    return "  n/a" if value is None else f"{100 * value:5.1f}"


def format_summary(summary: dict[str, Any]) -> str:
    """The analysis as plain text: rates per pair and stratum, BT, agreement, position bias."""
    if not summary["n_votes"]:
        return "No votes yet."
    lines = [
        f"{summary['n_votes']} votes on {summary['n_items']} items by "
        f"{summary['n_raters']} rater(s). Rates in % with Wilson 95% CI."
    ]
    for row in summary["rates"]:
        if row["stratum"] == "all":
            lines += ["", f"{row['model_a']} (a) vs {row['model_b']} (b)"]
        if not row["n"]:
            continue  # an empty stratum has nothing to say
        cells = "  ".join(
            f"{name} {_pct(row[f'{key}_rate'])} [{_pct(row[f'{key}_lo'])}-{_pct(row[f'{key}_hi'])}]"
            for key, name in (("a", "a"), ("b", "b"), ("tie", "tie"), ("both_poor", "both poor"))
        )
        lines.append(f"  {row['stratum']:<9} n={row['n']:<4} {cells}")
    if summary["bradley_terry"]:
        lines += ["", f"Bradley-Terry strength (95% bootstrap CI; {summary['ties']}):"]
        for row in summary["bradley_terry"]:
            lo = "n/a" if row["lo"] is None else f"{row['lo']:.2f}"
            hi = "n/a" if row["hi"] is None else f"{row['hi']:.2f}"
            lines.append(f"  {row['rank']}. {row['model']}: {row['strength']:.2f} [{lo}, {hi}]")
    agreement = summary["agreement"]
    if agreement["method"]:
        kappa = "n/a" if agreement["kappa"] is None else f"{agreement['kappa']:.3f}"
        lines.append(
            f"\nAgreement ({agreement['method']} kappa) on {agreement['n_items']} shared items: "
            f"{kappa}"
        )
    else:
        lines.append("\nAgreement: no item was rated by two or more raters.")
    bias = summary["position_bias"]
    if bias["n"]:
        lines.append(
            f"Position bias: left list chosen in {_pct(bias['left_rate']).strip()}% of "
            f"{bias['n']} A/B votes (binomial p = {bias['p_value']:.3g} vs 50%)."
        )
    return "\n".join(lines)
