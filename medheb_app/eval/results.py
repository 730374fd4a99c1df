"""Typed benchmark results that save and load themselves with their provenance.

Every result file is a `ResultFile`: a dataclass with its code version, creation time and
schema version, written atomically as JSON and read back into the same object.

- `TaskRun`: one model on one MedHEB task: scores, every query's ranked top-k with its
  relevance, the model card, the instruction used and timing (DIR/<model>/<task>.json).
- `CxrRetrieveReport`: one model on the 145 CXR-Retrieve queries: per setting per regime
  metrics and every query's top 10 with its labels (DIR/<model>/cxr-retrieve.json, or the
  file `cxr-retrieve eval --out` writes; `load_cxr_reports` reads both).
- `Summary`: one run (DIR/summary.json): every model's aggregates, the tasks, what was
  skipped and why, settings and timing. `kind` says which of the two result files it indexes.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import medheb_app
from medheb_app.settings import PROJECT_ROOT

SCHEMA_VERSION = 1


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def code_version() -> str:
    """`git describe --always --dirty` of the checkout, else the package version."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        described = ""
    return f"{medheb_app.__version__}+{described}" if described else medheb_app.__version__


def model_dirname(spec: str) -> str:
    """A file-system-safe folder name for a model spec ('open_clip:ViT-B-32@/w.pt' -> ...)."""
    slug = re.sub(r"[^A-Za-z0-9._@-]+", "_", spec).strip("_.")
    return slug or "model"


def _write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)  # atomic: a reader never sees half a file
    return path


@dataclass(kw_only=True)
class ResultFile:
    """Provenance shared by every result file, and its JSON save / load."""

    code_version: str = field(default_factory=code_version)
    created: str = field(default_factory=now_iso)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: Path) -> Path:
        return _write_json(Path(path), self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: object = "data"):
        """The object back from `to_dict`; a file of another schema is refused clearly."""
        if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"{origin} was written by an incompatible version of the runner.")
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def load(cls, path: Path):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No result file at {path}.")
        return cls.from_dict(json.loads(path.read_text()), path)


@dataclass
class TaskRun(ResultFile):
    """One model evaluated on one task (written to DIR/<model>/<task>.json)."""

    task: dict[str, Any]  # TaskMetadata as a dict
    model: str  # the spec string the user gave
    model_card: dict[str, Any]
    scores: dict[str, float]  # fractions in [0, 1]
    queries: list[dict[str, Any]]
    instruction: str
    n_candidates: int
    timing: dict[str, float] = field(default_factory=dict)
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)  # shown candidates
    note: str = ""

    @property
    def task_name(self) -> str:
        return str(self.task["name"])

    def to_disk(self, out_dir: Path) -> Path:
        return self.save(Path(out_dir) / model_dirname(self.model) / f"{self.task_name}.json")

    @classmethod
    def from_disk(cls, path: Path) -> TaskRun:
        return cls.load(path)


CXR_RETRIEVE_FILE = "cxr-retrieve.json"


@dataclass
class CxrRetrieveReport(ResultFile):
    """One model on CXR-Retrieve: per setting per regime metrics (percent), every query's top 10.

    `queries`: {id, kind, text, positives, negatives, top_k: [{id, score, findings, path}],
    n_relevant_main, n_relevant_strict, n_hard_negatives, metrics_main, metrics_strict}.
    """

    model: str
    source: str
    split: str | None
    setting: str
    paraphrase: bool
    n_gallery: int
    regimes: dict[str, dict[str, float]]
    settings: dict[str, dict[str, dict[str, float]]]
    without_relevant: dict[str, dict[str, int]]
    queries: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    timing_s: dict[str, float] = field(default_factory=dict)
    model_card: dict[str, Any] = field(default_factory=dict)
    gallery_revision: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return self.to_dict()

    def to_disk(self, out_dir: Path) -> Path:
        return self.save(Path(out_dir) / model_dirname(self.model) / CXR_RETRIEVE_FILE)


def load_cxr_reports(path: Path) -> list[CxrRetrieveReport]:
    """Every report in a file `cxr-retrieve eval --out` wrote (one, or {"runs": [...]}),
    a per-model report file, or a `bench run --suite cxr-retrieve` folder."""
    path = Path(path)
    if path.is_dir():
        summary = Summary.from_disk(path)
        return [summary.cxr_report(model) for model in summary.models]
    if not path.is_file():
        raise FileNotFoundError(f"No CXR-Retrieve result at {path}.")
    data = json.loads(path.read_text())
    runs = data["runs"] if isinstance(data, dict) and "runs" in data else [data]
    return [CxrRetrieveReport.from_dict(run, path) for run in runs]


@dataclass
class ModelSummary:
    """One model's aggregates; every number is a percentage (MedHEB tables)."""

    model: str
    model_card: dict[str, Any]
    tasks: dict[str, dict[str, Any]]  # task -> {family, split, graded, relation, scores %}
    families: dict[str, dict[str, float]]  # family -> {hit@1, mrr@5, hit@5, n_tasks}
    splits: dict[str, dict[str, float]]  # "ID" | "held-out-source" | "all" -> same keys
    consistency: dict[str, float]  # mu, sigma, cv over family Hit@1 (Appendix A.3)
    graded: dict[str, dict[str, float]]  # relation -> {ndcg@5, hit@1, n_tasks} + "all"
    note: str = ""


SUMMARY_KINDS = ("medheb", "cxr-retrieve")


@dataclass
class Summary:
    """DIR/summary.json: every model of one run, with provenance.

    kind "medheb": `models[m].tasks` holds Table 4 / 7 / 8 / 5 aggregates and DIR/<m>/<task>.json
    each task's TaskRun. kind "cxr-retrieve": `models[m].tasks["cxr-retrieve"]` holds the
    chosen setting's regime metrics flat ("negation/P@5") and DIR/<m>/cxr-retrieve.json the
    CxrRetrieveReport.
    """

    suite: str
    models: dict[str, ModelSummary]
    tasks: list[dict[str, Any]]  # task metadata with counts
    skipped: dict[str, str]
    out_dir: str
    started: str
    finished: str
    status: str = "finished"
    code_version: str = field(default_factory=code_version)
    settings: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    run_id: int | None = None
    schema_version: int = SCHEMA_VERSION
    kind: str = "medheb"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_disk(self, out_dir: Path | None = None) -> Path:
        return _write_json(Path(out_dir or self.out_dir) / "summary.json", self.to_dict())

    @classmethod
    def from_disk(cls, path: Path) -> Summary:
        path = Path(path)
        if path.is_dir():
            path = path / "summary.json"
        if not path.exists():
            raise FileNotFoundError(f"No benchmark summary at {path}.")
        data = json.loads(path.read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path} was written by an incompatible version of the runner.")
        data["models"] = {name: ModelSummary(**m) for name, m in data["models"].items()}
        return cls(**data)

    def task_run(self, model: str, task: str) -> TaskRun:
        """Load one model's per-task file (with every query's ranked list)."""
        return TaskRun.from_disk(Path(self.out_dir) / model_dirname(model) / f"{task}.json")

    def cxr_report(self, model: str) -> CxrRetrieveReport:
        """Load one model's CXR-Retrieve report (a cxr-retrieve run)."""
        return CxrRetrieveReport.load(Path(self.out_dir) / model_dirname(model) / CXR_RETRIEVE_FILE)
