"""PubMedQA expert-labelled set (PQA-L) -> linked text Studies for biomedical text-text retrieval.

Files: ori_pqal.json ({PMID: {QUESTION, CONTEXTS, LABELS, MESHES, LONG_ANSWER,
final_decision, ...}}) and test_ground_truth.json ({PMID: decision} for the 500 test ids).
Each PMID gives three Studies sharing meta["pmid"]: the question, its abstract context
(sections joined, labelled) and the long answer, so question -> context and question -> answer
are single-positive retrieval tasks (MedHEB T-T family).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from medheb_app.evidence.sources.layout import require_dir
from medheb_app.evidence.study import EvidenceError, Study

_REQUIRED = ("QUESTION", "CONTEXTS", "LABELS", "MESHES", "LONG_ANSWER", "final_decision")
_WHAT = "PubMedQA (PQA-L)"


@dataclass
class PubMedQA:
    """Questions, contexts and long answers, index-aligned and linked by meta["pmid"]."""

    questions: list[Study] = field(default_factory=list)
    contexts: list[Study] = field(default_factory=list)
    answers: list[Study] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.questions)


def _read_json(path: Path) -> dict[str, object]:
    if not path.is_file():
        raise EvidenceError(f"{path.parent} has no {path.name}; it is not the {_WHAT} layout.")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise EvidenceError(f"{path.name} is not valid JSON ({error}).") from None
    if not isinstance(data, dict):
        raise EvidenceError(f"{path.name} should map PMIDs to records.")
    return data


def load_pubmedqa(directory: Path | str) -> PubMedQA:
    """All PQA-L items; split is "test" for the ids in test_ground_truth.json, else "train"."""
    directory = require_dir(directory, _WHAT)
    records = _read_json(directory / "ori_pqal.json")
    test_ids = set(_read_json(directory / "test_ground_truth.json"))
    result = PubMedQA()
    for pmid, record in records.items():
        if not isinstance(record, dict):
            raise EvidenceError(f"ori_pqal.json: the entry for PMID {pmid} is not a record.")
        missing = [key for key in _REQUIRED if key not in record]
        if missing:
            raise EvidenceError(f"ori_pqal.json: PMID {pmid} lacks {', '.join(missing)}.")
        contexts, labels = list(record["CONTEXTS"]), list(record["LABELS"])
        context_text = "\n".join(
            f"{label}: {text}" for label, text in zip(labels, contexts, strict=False)
        )
        meta = {
            "pmid": pmid,
            "decision": record["final_decision"],
            "meshes": list(record["MESHES"]),
            "year": record.get("YEAR"),
        }
        split = "test" if pmid in test_ids else "train"
        for bucket, kind, text in (
            (result.questions, "question", record["QUESTION"]),
            (result.contexts, "context", context_text),
            (result.answers, "long_answer", record["LONG_ANSWER"]),
        ):
            bucket.append(
                Study(
                    id=f"pubmedqa-{kind}-{pmid}",
                    form="text",
                    modality="TEXT",
                    text=str(text),
                    patient_id=None,
                    split=split,
                    source="pubmedqa",
                    meta={**meta, "kind": kind},
                )
            )
    missing_test = test_ids - set(records)
    if missing_test:
        raise EvidenceError(
            f"test_ground_truth.json lists {len(missing_test)} PMID(s) absent from ori_pqal.json."
        )
    return result
