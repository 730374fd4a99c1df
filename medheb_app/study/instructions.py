"""What "better" means for an item, one line per task KIND, read from the task's own metadata
and relevance (issue 18 item 5).

Judging the wrong question wastes the vote: on a pairing task (CT -> X-ray, MR T1 -> T2,
prostate T2 -> DWI) the right answer is the same patient's other scan, not "the same finding".
The kind comes from the family where it fixes the answer's form (VG region, VQA answer, I-Rep
report, I-Lab label), from `graded`/`relation` for graded tasks, and otherwise from the
relevance the run recorded: a task whose every query has exactly one relevant candidate, a
different one per query, pairs each query with its own counterpart (MedHEB's paired tasks:
MB-VR, findings -> impression, question -> context); one whose queries share relevant
candidates asks for the same finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

INSTRUCTIONS = {
    "pairing-scan": (
        "Better = the same patient's other scan (the matching series of the other modality or "
        "sequence) is in its list, and higher up."
    ),
    "pairing-text": (
        "Better = the passage that belongs with the query text (its own abstract, impression or "
        "answer) is in its list, and higher up."
    ),
    "region": "Better = its crops show the region the query text describes on the query image.",
    "report": "Better = its reports describe what the query image shows.",
    "answer": "Better = it answers the question about the query image correctly.",
    "label": "Better = its labels name the finding the query image shows.",
    "finding": "Better = more of its images show the same finding as the query image.",
    "finding-text": "Better = more of its images show what the query text describes.",
    "graded": "Better = its images share the query image's finding and its {relation}, "
    "closest first.",
    "text": "Better = its passages match the query text.",
    "other": "Better = its top-3 list is more useful for the query.",
}
FAMILY_KINDS = {"VG": "region", "VQA": "answer", "I-Rep": "report", "I-Lab": "label"}


def is_pairing(golds: Iterable[Iterable[str]]) -> bool:
    """True when every query has exactly one relevant candidate and no two queries share it."""
    seen: set[str] = set()
    count = 0
    for gold in golds:
        ids = set(gold)
        if len(ids) != 1 or ids & seen:
            return False
        seen |= ids
        count += 1
    return count > 0


def relevance_kind(meta: Mapping[str, Any], golds: Iterable[Iterable[str]]) -> str:
    """The task's kind (a key of INSTRUCTIONS) from its metadata and its queries' relevant ids."""
    family = str(meta.get("family", ""))
    if family in FAMILY_KINDS:
        return FAMILY_KINDS[family]
    if meta.get("graded"):
        return "graded"
    paired = is_pairing(golds)
    form = str(meta.get("form", ""))
    if family in ("MB-VR", "I-I") or form == "3d":
        return "pairing-scan" if paired else "finding"
    if family == "T-T":
        return "pairing-text" if paired else "text"
    if family == "T-I":
        return "finding-text"
    return "other"


def instruction(meta: Mapping[str, Any], golds: Iterable[Iterable[str]]) -> str:
    """The one line shown above every item of the task."""
    kind = relevance_kind(meta, golds)
    relation = str(meta.get("relation") or "grade")
    return INSTRUCTIONS[kind].format(relation=relation)
