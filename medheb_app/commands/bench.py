"""`python -m medheb_app bench list|run|report`: the MedHEB benchmark from the command line.
`bench run --estimate` asks the runs facade (services.runs) the admin tab's estimate asks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.eval.reports import render_report
from medheb_app.eval.results import Summary
from medheb_app.settings import Settings
from medheb_app.tasks.base import FAMILIES, known_sizes

DEFAULT_SUITE = "medheb-lite"


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="list and run MedHEB benchmark suites",
        description="MedHEB: rank candidates by cosine for every task and model; report tables.",
    )
    commands = bench.add_subparsers(dest="bench_command", required=True)

    listing = commands.add_parser(
        "list", help="the suite's tasks from their metadata (--build: sizes and skips too)"
    )
    listing.add_argument("--suite", default=DEFAULT_SUITE, help=f"default {DEFAULT_SUITE}")
    listing.add_argument(
        "--build",
        action="store_true",
        help="build every task (minutes on real data) to show forms, sizes and skipped tasks",
    )
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)

    run = commands.add_parser("run", help="evaluate models on a suite and write results")
    run.add_argument(
        "--suite",
        default=DEFAULT_SUITE,
        help=f"medheb-lite, cxr-retrieve or a folder of task manifests (default {DEFAULT_SUITE})",
    )
    run.add_argument(
        "--model",
        action="append",
        required=True,
        help="model spec, repeatable ('random' and 'oracle' need no trained model; "
        "cxr-retrieve also takes logic:<spec>)",
    )
    run.add_argument("--out", help="output folder (created if missing; required unless --estimate)")
    run.add_argument("--task", action="append", help="only this task (repeatable)")
    run.add_argument(
        "--family", action="append", help="only the tasks of this family (repeatable, e.g. VG)"
    )
    cxr = run.add_argument_group("cxr-retrieve suite")
    cxr.add_argument("--data", default="phantom", help="phantom | nih:PATH | mimic:PATH")
    cxr.add_argument("--setting", choices=("main", "strict"), default="main")
    cxr.add_argument("--paraphrase", action="store_true", help="'an image with A but without B'")
    cxr.add_argument("--split", default="test", help="gallery split (default test; 'all')")
    cxr.add_argument("--probe-views", default="2x2+3x3", help="what logic: probes read")
    run.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local (this process, the default) or ray: each task x model pair (each model "
        "for cxr-retrieve) is a Ray task; the same files and store rows are written",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="with --engine ray: join this cluster ('auto' or host:port); "
        "default: start a local one for the run",
    )
    run.add_argument("--progress", action="store_true", help="print progress lines to stderr")
    run.add_argument(
        "--estimate",
        "--dry-run",
        action="store_true",
        help="run nothing: per task and model, the items to embed, how many the embedding "
        "cache holds and the estimated seconds",
    )
    run.add_argument(
        "--calibrate",
        action="store_true",
        help="with --estimate: time each never-measured model on 4 items of each input kind "
        "(loads the model) instead of the 0.3 s/item default",
    )
    add_json_flag(run)
    run.set_defaults(handler=run_bench)

    report = commands.add_parser("report", help="re-render the tables of a finished run")
    report.add_argument("--out", required=True, help="the run's output folder")
    add_json_flag(report)
    report.set_defaults(handler=run_report)


def _suite(name: str, args: argparse.Namespace | None = None):
    """The suite a name means; cxr-retrieve takes its gallery and setting from `args`."""
    # deferred: pandas
    from medheb_app.tasks.cxr_retrieve import SUITE_NAME, CxrRetrieveSuite
    from medheb_app.tasks.medheb import SUITES, get_suite

    if name == SUITE_NAME:
        if args is None:
            raise UserError("bench list covers MedHEB suites; cxr-retrieve has 145 fixed queries.")
        try:
            return CxrRetrieveSuite.from_options(
                args.data, args.split, args.setting, args.paraphrase, args.probe_views
            )
        except ValueError as error:
            raise UserError(str(error)) from None
    try:
        return get_suite(name)
    except KeyError:
        known = ", ".join([*SUITES, SUITE_NAME])
        raise UserError(f"Unknown suite {name!r}; known: {known} or a manifest folder.") from None


def _selected_tasks(suite, args: argparse.Namespace) -> list[str] | None:
    """--task names plus every task of each --family (None: the whole suite)."""
    wanted = list(args.task or [])
    for family in args.family or []:
        if family not in FAMILIES:
            raise UserError(f"Unknown family {family!r}; known: {', '.join(FAMILIES)}.")
        wanted += [n for n, spec in suite.specs.items() if spec.family == family]
    if (args.task or args.family) and not wanted:
        raise UserError("No task of the suite matches --task / --family.")
    return list(dict.fromkeys(wanted)) or None


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    """The suite's tasks. By default from the registered metadata only (name, family, split,
    source: nothing is built, so it answers in about a second); --build builds each task as a
    run would, for its form, query and candidate counts, and the tasks that would be skipped."""
    suite = _suite(args.suite)
    if not getattr(args, "build", False) and getattr(suite, "specs", None):
        sizes = known_sizes(settings)
        unknown = {"form": None, "n_queries": None, "n_candidates": None}
        rows = [
            {
                "name": spec.name,
                "family": spec.family,
                **sizes.get(spec.name, unknown),
                "split": spec.split,
                "source": spec.source,
                "trainable": spec.trainable,
            }
            for spec in suite.specs.values()
        ]
        payload = {"suite": suite.name, "built": False, "tasks": rows, "skipped": []}
        lines = [
            f"Suite {suite.name}: {len(rows)} tasks (metadata; form and sizes as last built "
            "here, '-' where never built; --build for sizes and skips)"
        ]
        lines += [
            f"  {r['name']:<32} {r['family']:<6} {r['form'] or '-':<4} {r['split']:<16} "
            f"{r['n_queries'] if r['n_queries'] is not None else '-':>4} queries "
            f"{r['n_candidates'] if r['n_candidates'] is not None else '-':>5} candidates  "
            f"{r['source']}"
            for r in rows
        ]
        return "\n".join(lines), payload
    tasks, skipped = suite.build(settings)
    rows = [
        {
            "name": task.name,
            "family": task.metadata.family,
            "form": task.metadata.form,
            "split": task.metadata.split,
            "n_queries": len(task.queries),
            "n_candidates": len(task.candidates),
            "source": task.metadata.source,
            "graded": task.metadata.graded,
        }
        for task in tasks
    ]
    payload = {
        "suite": suite.name,
        "built": True,
        "tasks": rows,
        "skipped": [{"name": name, "reason": why} for name, why in skipped.items()],
    }
    lines = [f"Suite {suite.name}: {len(rows)} tasks"]
    lines += [
        f"  {r['name']:<32} {r['family']:<6} {r['form']:<4} {r['split']:<16} "
        f"{r['n_queries']:>4} queries {r['n_candidates']:>5} candidates  {r['source']}"
        for r in rows
    ]
    lines += [f"  skipped {name}: {why}" for name, why in skipped.items()]
    return "\n".join(lines), payload


def _print_progress(fraction: float, message: str) -> None:
    print(f"[{100 * fraction:5.1f}%] {message}", file=sys.stderr, flush=True)


def _print_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_bench(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    # deferred: pandas
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

    suite = _suite(args.suite, args)
    only = None if isinstance(suite, CxrRetrieveSuite) else _selected_tasks(suite, args)
    if args.ray_address and args.engine != "ray":
        raise UserError("--ray-address needs --engine ray.")
    if args.estimate:
        return run_estimate(suite, args.model, only, settings, args.calibrate)
    if not args.out:
        raise UserError("bench run needs --out (or --estimate to run nothing).")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder.")
    try:
        summary = run_suite(
            suite,
            args.model,
            out,
            settings,
            progress=_print_progress if args.progress else None,
            only=only,
            log=_print_log if args.progress else None,
            engine=args.engine,
            ray_address=args.ray_address,
        )
    except KeyError as error:  # unknown task names or model specs
        raise UserError(error.args[0] if error.args else str(error)) from error
    except ValueError as error:
        raise UserError(str(error)) from error
    return render_report(summary), summary.to_dict()


def run_estimate(
    suite: Any,
    models: list[str],
    only: list[str] | None,
    settings: Settings,
    calibrate: bool = False,
) -> tuple[str, dict[str, Any]]:
    """`bench run --estimate`: the run's cost from the embedding cache's state, run nothing."""
    # deferred: sqlalchemy (the store, and services.runs' readers of it): `bench list` needs neither
    from medheb_app.services.runs import Runs
    from medheb_app.services.store import open_store

    try:
        estimate = Runs(settings, open_store(settings)).estimate_suite(
            suite, models, only, calibrate=calibrate
        )
    except KeyError as error:  # unknown task names
        raise UserError(error.args[0] if error.args else str(error)) from error
    return estimate.render(), estimate.to_dict()


def run_report(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    summary = Summary.from_disk(Path(args.out))
    text = render_report(summary)
    (Path(args.out) / "report.md").write_text(text)
    return text, summary.to_dict()
