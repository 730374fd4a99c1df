"""`python -m medheb_app index build|list|info|remove`: a lab's own archive as a named index.

`index list` and `index info` read catalog and manifest files only: they must never import
torch (or the model registry, or FAISS), so that they answer in well under 2 s
(tests/test_cli_fast.py guards it). Keep their imports to index.catalog's readers,
index.shards.incomplete_builds, index.lock and evidence.findings."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from medheb_app.cli import StderrProgress, UserError, add_json_flag
from medheb_app.evidence.findings import Vocabulary
from medheb_app.index.catalog import CATALOG_FILE, IndexNotFoundError, list_indices, remove_index
from medheb_app.index.lock import current_holder
from medheb_app.index.shards import DEFAULT_SHARD_SIZE, FAILED_FILE, incomplete_builds
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
            "interrupted resumes where it stopped when run again with the same arguments. "
            "A finished index is rebuilt only with --replace; one build per name at a time."
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
    build.add_argument(
        "--replace",
        action="store_true",
        help="rebuild an index that already exists for this model (without it: refused)",
    )
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

    resolve = actions.add_parser(
        "resolve",
        help="which file or DICOM UIDs an item of a folder / DICOM / manifest index is "
        "(admins only: it reads the server's source references)",
    )
    resolve.add_argument("name", help="index name")
    resolve.add_argument("id", help="item id, as a hit shows it (e.g. dicom-3f2a...)")
    add_json_flag(resolve)
    resolve.set_defaults(handler=run_resolve)

    remove = actions.add_parser("remove", help="delete an index (every model's build of it)")
    remove.add_argument("name")
    add_json_flag(remove)
    remove.set_defaults(handler=run_remove)


def run_build(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    # deferred: torch (the model registry), faiss, pandas: list and info must not load them
    from medheb_app.index.build import build_from_source
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
        progress=StderrProgress(),
        ray_actors=args.ray_actors,
        replace=args.replace,
    )
    payload = report.to_json()
    vocabulary = Vocabulary.from_dict(report.vocabulary) or Vocabulary()
    lines = [
        f"Index {report.name} ({report.model_spec}): {report.n_items} items, {report.kind}, "
        f"built in {report.seconds:.1f} s on {report.device} with the {report.engine} engine",
        f"Embedded {report.embedded}, reused {report.reused} (already embedded), "
        f"failed {report.failed}",
        f"Vocabulary: {vocabulary.describe()}",
        "Logic-aware ranking: prepared"
        if report.logic
        else f"Logic-aware ranking: not available ({report.logic_note})",
    ]
    lines += [f"Note: {note}" for note in report.notes]
    if report.failed:
        reasons = ", ".join(f"{n} {why}" for why, n in report.failed_by_reason.items())
        lines.append(f"Not indexed: {reasons}")
        lines.append(f"Every file not indexed and why: {report.directory}/failed.jsonl")
    return "\n".join(lines), payload


def resume_command(build: dict[str, Any]) -> str:
    """The `index build` command line that resumes an interrupted build (same arguments). A
    folder, DICOM or manifest source was not stored as typed (it may name a patient's folder):
    its place says KIND:PATH, to be filled with the path the build was started with."""
    source = build.get("source_text") or f"{build.get('source_kind') or 'KIND'}:PATH"
    parts = ["python -m medheb_app index build", "--source", shlex.quote(source)]
    if build.get("model_spec"):
        parts += ["--model", shlex.quote(build["model_spec"])]
    parts += ["--name", shlex.quote(build["name"])]
    if build.get("kind") and build["kind"] != "auto":
        parts += ["--kind", build["kind"]]
    if build.get("shard_size") and build["shard_size"] != DEFAULT_SHARD_SIZE:
        parts += ["--shard-size", str(build["shard_size"])]
    if build.get("replace"):
        parts.append("--replace")
    return " ".join(parts)


def unfinished_builds(settings: Settings) -> list[dict[str, Any]]:
    """Builds in progress (their lock's holder is alive) or interrupted (resume_command)."""
    finished = {(entry["name"], entry["fingerprint"]) for entry in list_indices(settings)}
    builds = []
    for build in incomplete_builds(settings):
        holder = current_holder(settings, build["name"])
        build["replace"] = (build["name"], build["fingerprint"]) in finished
        build["state"] = "building" if holder is not None else "incomplete"
        build["holder"] = holder.describe() if holder is not None else None
        build["resume"] = None if holder is not None else resume_command(build)
        builds.append(build)
    return builds


def _kind_with_params(kind: str, params: dict[str, Any]) -> str:
    """'ivf (nlist=64, nprobe=8)', or 'exact' for a kind without parameters."""
    shown = ", ".join(f"{key}={value}" for key, value in sorted(params.items()))
    return f"{kind} ({shown})" if shown else kind


def _unfinished_lines(builds: list[dict[str, Any]]) -> list[str]:
    lines = []
    for build in builds:
        spec = build["model_spec"] or build["fingerprint"]
        head = (
            f"{build['name']} ({spec}): {build['state']}, {build['done']} of {build['count']} "
            f"items committed"
        )
        if build["holder"]:
            lines.append(f"{head}, being built by {build['holder']}")
        else:
            lines.append(f"{head} (started {build['started'] or '?'}); resume with:")
            lines.append(f"  {build['resume']}")
            if not build.get("source_text"):
                lines.append(
                    "  (PATH: the source path you built from; it is not stored, so that no "
                    "folder named after a patient is written to disk)"
                )
    return lines


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, list[dict[str, Any]]]:
    entries = list_indices(settings)
    unfinished = unfinished_builds(settings)
    payload = [
        {**entry, "state": "complete"} for entry in entries
    ] + unfinished  # fmt: skip
    if not entries and not unfinished:
        return "No index has been built yet.", payload
    lines = [f"{'name':<24} {'model':<28} {'kind':<6} {'items':>8}  findings"] if entries else []
    for entry in entries:
        vocabulary = entry.get("vocabulary") or {}
        names = vocabulary.get("names") or []
        labels = f"{len(names)} ({vocabulary.get('scheme')})" if names else "-"
        lines.append(
            f"{entry['name']:<24} {entry['model_spec']:<28} {entry['kind']:<6} "
            f"{entry['count']:>8}  {labels}"
        )
    if unfinished:
        lines += ["", "Not finished:"] if entries else ["Not finished:"]
        lines += _unfinished_lines(unfinished)
    return "\n".join(lines), payload


def run_info(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    builds = [entry for entry in list_indices(settings) if entry["name"] == args.name]
    unfinished = [b for b in unfinished_builds(settings) if b["name"] == args.name]
    if not builds and not unfinished:
        names = sorted({entry["name"] for entry in list_indices(settings)})
        hint = f"Available: {', '.join(names)}." if names else "No index has been built yet."
        raise IndexNotFoundError(f"Index {args.name!r} does not exist. {hint}")
    payload: dict[str, Any] = {"name": args.name, "builds": [], "unfinished": unfinished}
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
            f"  model {entry['model_spec']} ({entry['fingerprint']}): {entry['count']} items, "
            f"{_kind_with_params(entry['kind'], info.get('params') or {})}, {entry['dims']} dims",
            f"  source: {source}; built {entry['created']}",
            f"  vocabulary: {vocabulary.describe()}",
            f"  failed items: {len(failures)}" + (f" (see {failed_file})" if failures else ""),
        ]
        lines += [f"  note: {note}" for note in info.get("notes", [])]
    if unfinished:
        lines += ["  not finished:"] + [f"    {line}" for line in _unfinished_lines(unfinished)]
    return "\n".join(lines), payload


def run_remove(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    models = remove_index(args.name, settings)
    return f"Removed index {args.name} ({', '.join(models) or 'no complete build'}).", {
        "name": args.name,
        "removed_models": models,
    }


def run_resolve(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    """`index resolve NAME ID`: the item's file, or its study / series / instance UIDs."""
    # deferred: SQLAlchemy and the store, needed only when resolving
    from medheb_app.index.provenance import resolve_reference

    try:
        found = resolve_reference(settings, args.name, args.id)
    except LookupError as error:
        raise UserError(str(error)) from None
    lines = [f"Item {args.id} of index {args.name} ({found['root_name']} source):"]
    if found["kind"] == "dicom":
        lines += [
            f"  StudyInstanceUID  {found['study_uid']}",
            f"  SeriesInstanceUID {found['series_uid']}",
            f"  SOPInstanceUIDs   {', '.join(found['instance_uids'])}",
        ]
    lines.append(f"  file {found['file']}")
    if len(found["files"]) > 1:
        lines.append(f"  ({len(found['files'])} files in {found['root_path']})")
    return "\n".join(lines), found
