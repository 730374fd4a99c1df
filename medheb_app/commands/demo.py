"""`python -m medheb_app demo build`: generate the phantom demo corpus and build its indices."""

from __future__ import annotations

import argparse
from typing import Any

from medheb_app.cli import StderrProgress, UserError, add_json_flag
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="the embedded synthetic demo corpus")
    actions = parser.add_subparsers(dest="demo_command", required=True)
    build = actions.add_parser(
        "build",
        help="generate the demo corpus and build its indices (skips what already exists)",
    )
    build.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")
    build.add_argument("--n", type=int, default=None, help="number of chest studies (default 2000)")
    build.add_argument(
        "--model",
        action="append",
        default=None,
        help="model spec to index with (repeatable; default: dual-lite, plus "
        "dual-lite@label-aware when its weights exist)",
    )
    build.add_argument(
        "--with-3d", action="store_true", help="also build the 3D (CT / MR) demo index"
    )
    add_json_flag(build)
    build.set_defaults(handler=run_build)


def run_build(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    # deferred: faiss, pandas
    from medheb_app.demo import ensure_demo

    if args.n is not None and args.n < 10:
        raise UserError(f"--n must be at least 10; got {args.n}.")
    assets = ensure_demo(
        settings,
        progress=StderrProgress(),
        n=args.n,
        seed=args.seed,
        models=args.model,
        with_3d=args.with_3d,
    )
    payload = assets.to_json()
    lines = [
        f"Demo corpus: {assets.n} synthetic chest studies (seed {assets.seed}) in "
        f"{assets.corpus_dir} ({'generated' if assets.corpus_generated else 'already there'})",
    ]
    for entry in assets.indices:
        state = "built" if entry["built"] else "already built"
        lines.append(
            f"Index {entry['name']} for {entry['model']}: {entry['count']} items, "
            f"{entry['kind']}, {state} ({entry['seconds']:.1f} s)"
        )
    lines.append(f"Done in {assets.seconds:.1f} s.")
    return "\n".join(lines), payload
