"""`python -m medheb_app search`: rank the demo (or any built) index for a text or file query,
through the search tab's facade (services.search) with the operator's rights."""

from __future__ import annotations

import argparse
from typing import Any

from medheb_app.cli import add_json_flag
from medheb_app.services.search import RANKINGS, SearchService
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "search",
        help="search an index with a text query or an image/volume file",
        description=(
            "Rank an index's studies for a compositional text query (e.g. 'pleural effusion "
            "and no cardiomegaly') or a PNG/JPEG, DICOM or NIfTI file."
        ),
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model spec (default: MEDHEB_DEFAULT_MODEL; with 'auto', its default, the strongest "
        "shipped model built for the index: dual-lite@label-aware, then dual-lite)",
    )
    parser.add_argument(
        "--index", default=None, help="index name (default: MEDHEB_DEFAULT_INDEX, else demo-cxr)"
    )
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--text", help="a text query (at most 1,000 characters)")
    query.add_argument("--file", help="an image, DICOM file/series folder/zip or NIfTI volume")
    parser.add_argument("--k", type=int, default=10, help="number of results (default 10)")
    parser.add_argument(
        "--setting",
        choices=("main", "strict"),
        default="main",
        help="'no B' holds when B is not positive (main) or only when B is 0 (strict)",
    )
    parser.add_argument(
        "--ranking",
        choices=RANKINGS,
        default="auto",
        help=(
            "auto (default): logic where the query names findings and the index has labelled "
            "train studies, else similarity; logic: the query's findings ANDed and negated over "
            "per-finding probes fit on the index's labelled train studies; similarity: cosine"
        ),
    )
    parser.add_argument(
        "--nprobe", type=int, default=None,
        help="IVF / IVF-PQ cells searched (default: recorded with the index)",
    )  # fmt: skip
    parser.add_argument(
        "--ef-search", type=int, default=None,
        help="HNSW search breadth (default: recorded with the index)",
    )  # fmt: skip
    parser.add_argument(
        "--rerank", type=int, default=None,
        help="IVF-PQ: re-score a k * RERANK shortlist exactly (0: PQ scores only; default: "
        "recorded with the index)",
    )  # fmt: skip
    parser.add_argument(
        "--include-training",
        action="store_true",
        help="logic ranking: also rank the studies the index's finding probes were fit on "
        "(left out by default: scored with their own labels they look better than they are; "
        "included, they are marked and scored out of fold)",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    response = SearchService(settings).operator(
        query_text=args.text,
        file=args.file,
        model=args.model,
        index=args.index,
        k=args.k,
        setting=args.setting,
        ranking=args.ranking,
        nprobe=args.nprobe,
        ef_search=args.ef_search,
        rerank=args.rerank,
        include_training=args.include_training,
    )
    payload = response.to_json()
    return format_response(payload), payload


RANKING_NOTES = {
    "similarity": "similarity (score = cosine)",
    "logic": "logic-aware (score = log p(study meets the query))",
}


def _mark(satisfied: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[satisfied]


TRAINING_MARKS = {
    "held-out": "no",
    "out-of-fold": "yes, p out of fold",
    "in-sample": "YES, p IN-SAMPLE",
}


def _training(hit: dict[str, Any]) -> str:
    """The hit's training mark: whether the index's probes were fit on its labels and, for a
    logic-aware score, whether its p comes from a probe that did not see it."""
    if hit.get("p_fit"):
        return TRAINING_MARKS[hit["p_fit"]]
    return "yes" if hit.get("training") else "no"


def format_response(payload: dict[str, Any]) -> str:
    """A readable table: rank, score, whether the hit meets the query, its positive findings."""
    constraints = payload["constraints"]
    wanted = ", ".join(constraints["positive"]) or "-"
    excluded = ", ".join(constraints["negative"]) or "-"
    lines = [
        f"Query:  {payload['query']}",
        f"Model:  {payload['model']}    Index: {payload['index']}    "
        f"Ranking: {RANKING_NOTES[payload.get('ranking', 'similarity')]}",
    ]
    if payload["query_kind"] == "text":
        lines.append(f"Wanted: {wanted}    Excluded: {excluded}")
    if constraints.get("uncertain"):
        named = ", ".join(constraints["uncertain"])
        lines.append(f"Uncertain: {named} (hedged or unclear: neither required nor excluded)")
    if payload["unknown_terms"]:
        lines.append(f"Not understood: {', '.join(payload['unknown_terms'])}")
    corrections = payload.get("corrections") or {}
    if corrections:
        read = ", ".join(f"'{typed}' as '{as_}'" for typed, as_ in corrections.items())
        lines.append(f"Read: {read}")
    for typed, found in (payload.get("suggestions") or {}).items():
        lines.append(f"Did you mean: {' / '.join(found)} (for '{typed}')?")
    lines.extend(f"Warning: {warning}" for warning in payload["warnings"])
    lines.append("")
    id_width = max([len(hit["id"]) for hit in payload["results"]] + [2])
    marks = [_training(hit) for hit in payload["results"]]
    mark_width = max([len(mark) for mark in marks] + [8])
    lines.append(
        f"{'#':>3}  {'id':<{id_width}}  {'score':>7}  {'meets':<5}  {'training':<{mark_width}}  "
        "positive findings"
    )
    for hit, mark in zip(payload["results"], marks, strict=True):
        positives = [name for name, value in hit["findings"].items() if value == 1]
        broken = "".join(
            f"  [{name}: {why}]" for name, why in sorted(hit.get("violations", {}).items())
        )
        lines.append(
            f"{hit['rank']:>3}  {hit['id']:<{id_width}}  {hit['score']:>7.4f}  "
            f"{_mark(hit['satisfies']):<5}  {mark:<{mark_width}}  "
            f"{', '.join(positives) or '(none)'}{broken}"
        )
    if any(hit.get("training") for hit in payload["results"]):
        lines.append(
            "\ntraining = yes: the index's finding probes were fit on this study's labels "
            "(a logic-aware score then comes from the cross-fitted probe that left it out, or "
            "says IN-SAMPLE)."
        )
    if any(hit["synthetic"] for hit in payload["results"]):
        lines.append("\nResults marked synthetic come from the generated phantom corpus.")
    return "\n".join(lines)
