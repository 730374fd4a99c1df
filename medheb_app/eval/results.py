"""Typed benchmark results that save and load themselves with their provenance.

A TaskRun is one model on one task: scores, every query's ranked top-k with its relevance,
the model card, the instruction used, code and data revisions, and timing. A Summary is the
suite-level aggregate of MedHEB Table 4 / 7 / 8 / 5 for every model in one run.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass, field
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


@dataclass
class TaskRun:
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
    code_version: str = field(default_factory=code_version)
    created: str = field(default_factory=now_iso)
    note: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def task_name(self) -> str:
        return str(self.task["name"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_disk(self, out_dir: Path) -> Path:
        return _write_json(
            Path(out_dir) / model_dirname(self.model) / f"{self.task_name}.json", self.to_dict()
        )

    @classmethod
    def from_disk(cls, path: Path) -> TaskRun:
        data = json.loads(Path(path).read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path} was written by an incompatible version of the runner.")
        return cls(**data)


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


@dataclass
class Summary:
    """DIR/summary.json: every model of one run, with provenance."""

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
