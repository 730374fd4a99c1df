"""`python -m medheb_app index build|list|info|remove`: a lab's own archive as a named index."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.evidence.findings import Vocabulary
from medheb_app.settings import Settings

KINDS = ("auto", "exact", "ivf", "hnsw", "ivfpq")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("index", help="build, list, inspect or remove named indices")
    actions = parser.add_subparsers(dest="index_command", required=True)
    build = actions.add_parser(
        "build",
        help="embed a source (NIH, MIMIC-CXR-JPG, CheXpert, DICOM, PNG folder, ...) as an index",
        description=(
            "SOURCE: phantom[:N], nih:PATH, mimic:PATH, chexpert:PATH, dicom:FOLDER[,labels=CSV], "
            "folder:PATH[,labels=CSV], medmnist:FILE.npz or manifest:FILE (.jsonl or .parquet). "
            "Unreadable files are listed in failed.jsonl next to the index; a build that is "
            "interrupted resumes where it stopped when run again with the same arguments."
        ),
    )
    build.add_argument("--source", required=True, help="what to index (see above)")
    build.add_argument(
        "--model",
        default=None,
        help="model spec (default: MEDHEB_DEFAULT_MODEL; with 'auto', the strongest "
        "shipped model whose weights are present)",
    )
    build.add_argument("--name", required=True, help="index name (letters, digits, . _ @ + -)")
    build.add_argument("--engine", choices=("local", "ray"), default="local")
    build.add_argument(
        "--ray-address", default=None, help="join a Ray cluster ('auto' or host:port)"
    )
    build.add_argument(
        "--ray-actors", type=int, default=None,
        help="embedding actors (default: one per GPU, else one per CPU of the cluster)",
    )  # fmt: skip
    build.add_argument(
        "--device", default=None, help="auto, cpu, cuda or cuda:N (default: MEDHEB_DEVICE)"
    )
    build.add_argument("--batch-size", type=int, default=32, help="items per model call")
    build.add_argument("--kind", choices=KINDS, default="auto", help="FAISS index kind")
    build.add_argument(
        "--shard-size", type=int, default=512, help="items per committed shard (resume unit)"
    )
    add_json_flag(build)
    build.set_defaults(handler=run_build)

    listing = actions.add_parser("list", help="every built index")
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)

    info = actions.add_parser("info", help="one index: model, size, kind, vocabulary, failures")
    info.add_argument("name")
    add_json_flag(info)
    info.set_defaults(handler=run_info)

    remove = actions.add_parser("remove", help="delete an index (every model's build of it)")
    remove.add_argument("name")
    add_json_flag(remove)
    remove.set_defaults(handler=run_remove)


class _Progress:
    """One stderr line per new step and per 10% (stdout stays one JSON document)."""

    def __init__(self) -> None:
        self.last_step, self.last_decile = "", -1

    def __call__(self, fraction: float, message: str) -> None:
        step = message.split(" ", 1)[0]
        decile = int(fraction * 10)
        if step != self.last_step or decile != self.last_decile:
            print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)
        self.last_step, self.last_decile = step, decile


def run_build(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    # deferred: faiss, pandas
    from medheb_app.index.build import build_from_source
    from medheb_app.index.sources import describe_vocabulary
    from medheb_app.serving import build_default_model

    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1; got {args.batch_size}.")
    if args.shard_size < 1:
        raise UserError(f"--shard-size must be at least 1; got {args.shard_size}.")
    report = build_from_source(
        args.source,
        args.model or build_default_model(settings),
        args.name,
        settings,
        engine=args.engine,
        ray_address=args.ray_address,
        device=args.device,
        batch_size=args.batch_size,
        kind=args.kind,
        shard_size=args.shard_size,
        progress=_Progress(),
        ray_actors=args.ray_actors,
    )
    payload = report.to_json()
    vocabulary = Vocabulary.from_dict(report.vocabulary) or Vocabulary()
    lines = [
        f"Index {report.name} ({report.model}): {report.n_items} items, {report.kind}, "
        f"built in {report.seconds:.1f} s on {report.device} with the {report.engine} engine",
        f"Embedded {report.embedded}, reused {report.reused} (already embedded), "
        f"failed {report.failed}",
        f"Vocabulary: {describe_vocabulary(vocabulary)}",
        "Logic-aware ranking: prepared"
        if report.logic
        else f"Logic-aware ranking: not available ({report.logic_note})",
    ]
    if report.failed:
        lines.append(f"Unreadable items and why: {report.directory}/failed.jsonl")
    return "\n".join(lines), payload


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, list[dict[str, Any]]]:
    # deferred: faiss
    from medheb_app.index.catalog import list_indices

    entries = list_indices(settings)
    if not entries:
        return "No index has been built yet.", entries
    lines = [f"{'name':<24} {'model':<28} {'kind':<6} {'items':>8}  findings"]
    for entry in entries:
        vocabulary = entry.get("vocabulary") or {}
        names = vocabulary.get("names") or []
        labels = f"{len(names)} ({vocabulary.get('scheme')})" if names else "-"
        lines.append(
            f"{entry['name']:<24} {entry['model']:<28} {entry['kind']:<6} {entry['count']:>8}  "
            f"{labels}"
        )
    return "\n".join(lines), entries


def run_info(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    from pathlib import Path

    # deferred: faiss, pandas
    from medheb_app.index.build import FAILED_FILE
    from medheb_app.index.catalog import CATALOG_FILE, IndexNotFoundError, list_indices
    from medheb_app.index.sources import describe_vocabulary

    builds = [entry for entry in list_indices(settings) if entry["name"] == args.name]
    if not builds:
        names = sorted({entry["name"] for entry in list_indices(settings)})
        hint = f"Available: {', '.join(names)}." if names else "No index has been built yet."
        raise IndexNotFoundError(f"Index {args.name!r} does not exist. {hint}")
    payload: dict[str, Any] = {"name": args.name, "builds": []}
    lines = [f"Index {args.name}"]
    for entry in builds:
        folder = Path(entry["path"])
        info = json.loads((folder / CATALOG_FILE).read_text())
        failed_file = folder / FAILED_FILE
        failures = (
            [json.loads(line) for line in failed_file.read_text().splitlines() if line.strip()]
            if failed_file.is_file()
            else []
        )
        info["failures"] = failures[:50]
        payload["builds"].append(info)
        vocabulary = Vocabulary.from_dict(info.get("vocabulary")) or Vocabulary()
        source = info.get("corpus", {}).get("spec") or info.get("corpus", {}).get("kind", "?")
        lines += [
            f"  model {entry['model']} ({entry['fingerprint']}): {entry['count']} items, "
            f"{entry['kind']} {info.get('params', {})}, {entry['dims']} dims",
            f"  source: {source}; built {entry['created']}",
            f"  vocabulary: {describe_vocabulary(vocabulary)}",
            f"  failed items: {len(failures)}" + (f" (see {failed_file})" if failures else ""),
        ]
    return "\n".join(lines), payload


def run_remove(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    # deferred: faiss
    from medheb_app.index.catalog import remove_index

    models = remove_index(args.name, settings)
    return f"Removed index {args.name} ({', '.join(models) or 'no complete build'}).", {
        "name": args.name,
        "removed_models": models,
    }
