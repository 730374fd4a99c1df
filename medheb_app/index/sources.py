"""Source specs -> Studies plus the source's own finding vocabulary, for `index build`.

One parser shared by the CLI and the admin job, so both accept exactly the same strings:

  phantom[:N]            the synthetic demo chest corpus (N studies, default settings.demo_size)
  nih:PATH               NIH ChestX-ray14 (shared 1,000-image copy or the official layout)
  mimic:PATH             MIMIC-CXR-JPG (files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg + tables)
  chexpert:PATH          a CheXpert folder (train.csv / valid.csv beside the images) or table
  dicom:FOLDER           any tree of DICOM files, one Study per series
  folder:PATH            any tree of PNG / JPEG files
  medmnist:FILE.npz      a MedMNIST / MedMNIST+ archive
  manifest:FILE          JSONL or parquet, one item per row (see load_item_manifest)

`dicom:` and `folder:` take an optional labels CSV: `labels.csv` at the folder's root is read
when present, or name one with `,labels=FILE` (e.g. `folder:/data/pngs,labels=/data/l.csv`).

Every source says which findings it labels and how (Vocabulary): NIH is positive-only (a
listed finding is 1, anything else unmentioned); CheXpert and MIMIC code 1 / 0 / -1 / blank.
Index rows keep the source's own names (NIH's "Effusion", not CheXpert's "Pleural Effusion"),
so a query is parsed against the names the index actually labels.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.evidence.findings import (
    CHEXPERT_14,
    CXR_RETRIEVE_10,
    NIH_14,
    Vocabulary,
    scheme_of,
)
from medheb_app.evidence.phantoms import saved  # saved.corpora_root: tests redirect it
from medheb_app.evidence.phantoms.corpus import load_corpus
from medheb_app.evidence.phantoms.saved import CorpusKey, ensure_saved
from medheb_app.evidence.sources.chexpert import load_chexpert
from medheb_app.evidence.sources.dicom_folder import load_dicom_folder
from medheb_app.evidence.sources.layout import read_table
from medheb_app.evidence.sources.medmnist import MEDMNIST, dataset_name, load_medmnist
from medheb_app.evidence.sources.mimic import load_mimic
from medheb_app.evidence.sources.nih import load_nih
from medheb_app.evidence.study import Study
from medheb_app.settings import Settings
from medheb_app.tasks.manifest import read_rows

SOURCE_KINDS = ("phantom", "nih", "mimic", "chexpert", "dicom", "folder", "medmnist", "manifest")
SCHEMES = ("positive-only", "coded", "none")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LABELS_FILE = "labels.csv"
_PATH_COLUMNS = ("path", "file", "filename", "image", "Path", "Image Index")
_DICOM_KEY_COLUMNS = ("SeriesInstanceUID", "series_uid", "StudyInstanceUID", "study_uid")
_NOT_FINDINGS = {"split", "patient_id", "Patient ID", "text", "report", "id", "view"}
USAGE = (
    "phantom[:N], nih:PATH, mimic:PATH, chexpert:PATH, dicom:FOLDER[,labels=CSV], "
    "folder:PATH[,labels=CSV], medmnist:FILE.npz or manifest:FILE(.jsonl|.parquet)"
)


class SourceError(ValueError):
    """A source spec that cannot be read; the message says what was expected."""


@dataclass(frozen=True)
class SourceSpec:
    """A parsed `--source` string."""

    kind: str
    path: Path | None = None
    n: int | None = None
    labels: Path | None = None
    text: str = ""

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path) if self.path else None,
            "n": self.n,
            "labels": str(self.labels) if self.labels else None,
            "spec": self.text,
        }


@dataclass
class LoadedSource:
    """What a source yields: studies to embed, files already known unreadable, vocabulary."""

    spec: SourceSpec
    studies: list[Study]
    vocabulary: Vocabulary
    failed: list[dict[str, str]] = field(default_factory=list)  # {"item", "reason"}
    corpus: dict[str, Any] | None = None  # what the index records as its corpus (spec's if None)

    def describe(self) -> dict[str, Any]:
        """The `corpus` entry of the index built from this source."""
        return {**self.spec.describe(), **(self.corpus or {})}


def in_memory(
    studies: list[Study], label: str = "studies", vocabulary: Vocabulary | None = None
) -> LoadedSource:
    """Studies already in memory as a source (tests, benchmarks, a caller's own corpus). The
    vocabulary defaults to the CXR-Retrieve ten when the studies carry labels (as the demo)."""
    rows = [s.findings for s in studies]
    if vocabulary is None:
        labelled = any(value is not None for row in rows for value in row.values())
        vocabulary = (
            Vocabulary(CXR_RETRIEVE_10, scheme_of(rows), label)
            if labelled
            else Vocabulary((), "none", label)
        )
    return LoadedSource(SourceSpec("memory", text=label), list(studies), vocabulary)


def phantom_source(settings: Settings, n: int, seed: int) -> LoadedSource:
    """The saved phantom chest corpus (n studies, seed) as a source. Its query findings are
    the CXR-Retrieve ten (CXR-Retrieve section 3: CheXpert 14 minus No Finding, Support
    Devices, Enlarged Cardiomediastinum and Pleural Other), whoever builds it (the demo, `index
    build --source phantom`, an admin job), so every build of one corpus answers alike."""
    key = CorpusKey("cxr", n, seed)
    directory, _ = ensure_saved(saved.corpora_root(settings), key)
    studies = load_corpus(directory)
    vocabulary = Vocabulary(CXR_RETRIEVE_10, scheme_of([s.findings for s in studies]), "phantom")
    spec = SourceSpec("phantom", n=n, text=f"phantom:{n}")
    return LoadedSource(spec, studies, vocabulary, corpus=key.record(directory))


def phantom_volume_source(settings: Settings, n_subjects: int, seed: int) -> LoadedSource:
    """The saved CT / MR phantom subjects as a source (no finding labels: similarity only)."""
    key = CorpusKey("volumes", n_subjects, seed)
    directory, _ = ensure_saved(saved.corpora_root(settings), key)
    spec = SourceSpec("phantom-volumes", n=n_subjects, text=f"phantom-volumes:{n_subjects}")
    vocabulary = Vocabulary((), "none", "phantom-volumes")
    return LoadedSource(spec, load_corpus(directory), vocabulary, corpus=key.record(directory))


def parse_source(text: str) -> SourceSpec:
    """`kind:path[,labels=CSV]` or `phantom[:N]` -> SourceSpec; a clear SourceError otherwise."""
    raw = (text or "").strip()
    kind, colon, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind not in SOURCE_KINDS:
        raise SourceError(f"Unknown source {raw!r}; use {USAGE}.")
    if kind == "phantom":
        if not colon or not rest.strip():
            return SourceSpec("phantom", text=raw)
        try:
            n = int(rest)
        except ValueError:
            raise SourceError(f"phantom:N needs a number of studies; got {rest!r}.") from None
        if n < 10:
            raise SourceError(f"phantom:N needs at least 10 studies; got {n}.")
        return SourceSpec("phantom", n=n, text=raw)
    if not rest.strip():
        raise SourceError(f"Source {kind}: needs a path, e.g. {kind}:/data/archive.")
    path_text, labels = rest, None
    if ",labels=" in rest:
        if kind not in ("dicom", "folder"):
            raise SourceError(f"labels= applies to dicom: and folder: sources, not {kind}:.")
        path_text, _, labels_text = rest.partition(",labels=")
        labels = Path(labels_text.strip()).expanduser()
    path = Path(path_text.strip()).expanduser()
    return SourceSpec(kind, path=path, labels=labels, text=raw)


def load_source(spec: SourceSpec | str, settings: Settings) -> LoadedSource:
    """The studies and vocabulary of a source; EvidenceError/SourceError say what is wrong."""
    spec = parse_source(spec) if isinstance(spec, str) else spec
    if spec.path is not None and not spec.path.exists():
        raise SourceError(f"{spec.path} does not exist (source {spec.text!r}).")
    if spec.labels is not None and not spec.labels.is_file():
        raise SourceError(f"Labels file {spec.labels} does not exist.")
    loader = {
        "phantom": _phantom,
        "nih": _nih,
        "mimic": _mimic,
        "chexpert": _chexpert,
        "dicom": _dicom,
        "folder": _folder,
        "medmnist": _medmnist,
        "manifest": _manifest,
    }[spec.kind]
    loaded = loader(spec, settings)
    if not loaded.studies and not loaded.failed:
        raise SourceError(f"Source {spec.text!r} has no items to index.")
    return loaded


# ---------------------------------------------------------------- one loader per kind


def _phantom(spec: SourceSpec, settings: Settings) -> LoadedSource:
    loaded = phantom_source(settings, spec.n or settings.demo_size, settings.demo_seed)
    loaded.spec = spec
    return loaded


def _nih(spec: SourceSpec, settings: Settings) -> LoadedSource:
    studies = load_nih(spec.path)  # type: ignore[arg-type]
    for study in studies:  # NIH's own names: "Effusion", "Emphysema", ... positive-only
        labels = set(study.meta.get("nih_labels", []))  # type: ignore[arg-type]
        study.findings = {name: (1 if name in labels else None) for name in NIH_14}
    return LoadedSource(spec, studies, Vocabulary(NIH_14, "positive-only", "nih-cxr14"))


def _mimic(spec: SourceSpec, settings: Settings) -> LoadedSource:
    studies = load_mimic(spec.path)  # type: ignore[arg-type]
    return LoadedSource(spec, studies, Vocabulary(CHEXPERT_14, "coded", "mimic-cxr"))


def _chexpert(spec: SourceSpec, settings: Settings) -> LoadedSource:
    path = spec.path
    assert path is not None
    if path.is_dir():
        tables = [path / n for n in ("train.csv", "valid.csv", "test.csv") if (path / n).is_file()]
        if not tables:
            raise SourceError(f"{path} has no train.csv or valid.csv; not a CheXpert folder.")
        root = path.parent  # Path column starts with the release folder (CheXpert-v1.0-small/)
        studies = [s for table in tables for s in load_chexpert(table, image_root=root)]
    else:
        studies = load_chexpert(path, image_root=path.parent.parent)
    failed = [
        {"item": str(s.meta.get("image_path")), "reason": "image file not found"}
        for s in studies
        if s.path is None
    ]
    kept = [s for s in studies if s.path is not None]
    return LoadedSource(spec, kept, Vocabulary(CHEXPERT_14, "coded", "chexpert"), failed)


def _dicom(spec: SourceSpec, settings: Settings) -> LoadedSource:
    folder = load_dicom_folder(spec.path)  # type: ignore[arg-type]
    failed = [{"item": "DICOM series", "reason": reason} for reason in folder.skipped]
    studies = folder.studies
    labels_file = spec.labels or _default_labels(spec.path)
    vocabulary = Vocabulary(source="dicom")
    if labels_file is not None:
        table, names = _label_table(labels_file, _DICOM_KEY_COLUMNS)
        by_id = {
            f"dicom-{hashlib.sha256(str(key).encode()).hexdigest()[:16]}": row
            for key, row in table.items()
        }
        for study in studies:
            row = by_id.get(study.id)
            if row is not None:
                study.findings, study.split = row["findings"], row["split"]
        vocabulary = Vocabulary(names, scheme_of([s.findings for s in studies]), "dicom")
    return LoadedSource(spec, studies, vocabulary, failed)


def _folder(spec: SourceSpec, settings: Settings) -> LoadedSource:
    root = spec.path
    assert root is not None
    if not root.is_dir():
        raise SourceError(f"{root} is not a folder of PNG / JPEG images.")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise SourceError(f"{root} contains no .png, .jpg or .jpeg files.")
    labels_file = spec.labels or _default_labels(root)
    table: dict[str, dict[str, Any]] = {}
    names: tuple[str, ...] = ()
    if labels_file is not None:
        table, names = _label_table(labels_file, _PATH_COLUMNS)
    studies = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        row = table.get(relative) or table.get(path.name) or {}
        studies.append(
            Study(
                id=f"folder-{relative.rsplit('.', 1)[0].replace('/', '-')}",
                form="2d",
                modality="OT",
                path=str(path),
                findings=dict(row.get("findings", {})),
                split=row.get("split"),
                patient_id=row.get("patient_id"),
                source="folder",
                meta={"relative_path": relative},
            )
        )
    scheme = scheme_of([s.findings for s in studies]) if names else "none"
    return LoadedSource(spec, studies, Vocabulary(names, scheme, "folder"))


def _medmnist(spec: SourceSpec, settings: Settings) -> LoadedSource:
    path = spec.path
    assert path is not None
    studies = load_medmnist(path)
    info = MEDMNIST[dataset_name(path)]
    for study in studies:  # the data set's own names; multi-class labels exclude each other
        if info.task == "multi-label":
            positive = set(study.meta.get("labels", []))  # type: ignore[arg-type]
            study.findings = {n: (1 if n in positive else None) for n in info.labels}
        else:
            label = study.meta.get("label")
            study.findings = {n: (1 if n == label else 0) for n in info.labels}
    scheme = "positive-only" if info.task == "multi-label" else "coded"
    return LoadedSource(spec, studies, Vocabulary(info.labels, scheme, f"medmnist:{path.stem}"))


def load_item_manifest(path: Path) -> tuple[list[Study], list[dict[str, str]]]:
    """Rows {"id", "image" | "volume" | "text", "findings": {name: 1|0|-1|null}, "split",
    "patient_id"}; file paths are relative to the manifest. Rows of a task manifest
    ({"query", "candidates"}) contribute their candidate items."""
    try:
        rows = read_rows(path)
    except (ValueError, OSError) as error:
        raise SourceError(str(error)) from None
    items: dict[str, dict[str, Any]] = {}
    failed: list[dict[str, str]] = []
    for number, row in enumerate(rows, start=1):
        candidates = row.get("candidates") if isinstance(row, dict) else None
        entries = [c for c in candidates if isinstance(c, dict)] if candidates else [row]
        for entry in entries:
            if not isinstance(entry, dict) or not entry.get("id"):
                failed.append({"item": f"row {number}", "reason": "no id"})
                continue
            items.setdefault(str(entry["id"]), entry)
    studies = []
    for item_id, entry in items.items():
        relative = entry.get("image") or entry.get("volume")
        if relative is None and entry.get("text") is None:
            failed.append({"item": item_id, "reason": "no image, volume or text"})
            continue
        findings = entry.get("findings") or {}
        studies.append(
            Study(
                id=item_id,
                form="text" if relative is None else ("2d" if entry.get("image") else "3d"),
                modality=str(entry.get("modality") or ("TEXT" if relative is None else "OT")),
                path=str((path.parent / relative).resolve()) if relative else None,
                text=entry.get("text"),
                findings={str(k): (None if v is None else int(v)) for k, v in findings.items()},
                split=entry.get("split"),
                patient_id=entry.get("patient_id"),
                source=f"manifest:{path.stem}",
            )
        )
    return studies, failed


def _manifest(spec: SourceSpec, settings: Settings) -> LoadedSource:
    path = spec.path
    assert path is not None
    studies, failed = load_item_manifest(path)
    names = _ordered_names(studies, ())
    return LoadedSource(
        spec,
        studies,
        Vocabulary(names, scheme_of([s.findings for s in studies]), f"manifest:{path.stem}"),
        failed,
    )


# ---------------------------------------------------------------- helpers


def _ordered_names(studies: list[Study], preferred: tuple[str, ...]) -> tuple[str, ...]:
    """Finding names the studies carry: `preferred` order first, then first appearance."""
    seen: dict[str, None] = {}
    for study in studies:
        seen.update(dict.fromkeys(study.findings))
    return tuple([n for n in preferred if n in seen] + [n for n in seen if n not in preferred])


def _default_labels(folder: Path | None) -> Path | None:
    candidate = folder / LABELS_FILE if folder is not None else None
    return candidate if candidate is not None and candidate.is_file() else None


def _label_value(value: object, column: str, key: object) -> int | None:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SourceError(
            f"Labels for {key}: {column!r} is {value!r}; expected 1, 0, -1 or blank."
        ) from None
    if number not in (1.0, 0.0, -1.0):
        raise SourceError(f"Labels for {key}: {column!r} is {value}; expected 1, 0, -1 or blank.")
    return int(number)


def _label_table(
    path: Path, key_columns: tuple[str, ...]
) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    """key -> {"findings", "split", "patient_id"} and the finding column names, in order.

    The key is the first of `key_columns` the CSV has; every other column except split,
    patient_id, text and view is a finding coded 1 / 0 / -1 / blank, named as in the header.
    """
    frame = read_table(path, [])
    key = next((c for c in key_columns if c in frame.columns), None)
    if key is None:
        raise SourceError(
            f"{path.name} needs one of the columns {', '.join(key_columns)} to match labels "
            "to images."
        )
    names = tuple(
        str(c)
        for c in frame.columns
        if c != key and c not in _NOT_FINDINGS and c not in key_columns
    )
    table: dict[str, dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        item = str(row[key])
        split = row.get("split")
        patient = row.get("patient_id", row.get("Patient ID"))
        table[item] = {
            "findings": {n: _label_value(row[n], n, item) for n in names},
            "split": None if split is None or split != split else str(split),
            "patient_id": None if patient is None or patient != patient else str(patient),
        }
    return table, names


def describe_vocabulary(vocabulary: Vocabulary) -> str:
    """One line for people: '14 findings (positive-only, nih-cxr14): Atelectasis, ...'."""
    if not vocabulary.labelled:
        return "no finding labels"
    return (
        f"{len(vocabulary.names)} findings ({vocabulary.scheme}, {vocabulary.source}): "
        + ", ".join(vocabulary.names)
    )
