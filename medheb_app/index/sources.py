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

import os
from collections import Counter
from collections.abc import Callable
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
from medheb_app.evidence.sources.layout import read_table
from medheb_app.evidence.sources.medmnist import MEDMNIST, dataset_name, load_medmnist
from medheb_app.evidence.sources.mimic import load_mimic
from medheb_app.evidence.sources.nih import load_nih
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.index.provenance import (
    ID_SCHEME,
    PATHS_BY_REFERENCE,
    inside_roots,
    pseudonym,
    pseudonym_key,
    served_roots,
    source_record,
    source_root,
)
from medheb_app.settings import Settings

Progress = Callable[[str], None]

SOURCE_KINDS = ("phantom", "nih", "mimic", "chexpert", "dicom", "folder", "medmnist", "manifest")
SCHEMES = ("positive-only", "coded", "none")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# Files a manifest's folder holds that a row should name (else "no manifest row").
MEDIA_SUFFIXES = (*IMAGE_SUFFIXES, ".dcm", ".nii", ".nii.gz", ".npy")
LABELS_FILE = "labels.csv"
_PATH_COLUMNS = ("path", "file", "filename", "image", "Path", "Image Index")
_DICOM_KEY_COLUMNS = ("SeriesInstanceUID", "series_uid", "StudyInstanceUID", "study_uid")
# A file a server-started job was not allowed to read (a symbolic link or a manifest row that
# leads out of MEDHEB_SOURCE_ROOTS); the reason names no path.
OUTSIDE_ROOTS = "outside the server's source roots"
# Why a file the source holds is no item (failed.jsonl "reason"; the build summary counts them).
REASONS = (
    "not an image",
    "no pixel data",
    "missing file",
    "no manifest row",
    "duplicate instance",
    "unreadable",
    OUTSIDE_ROOTS,
)
# Kinds whose loaders list their files themselves and check each against the roots before
# reading it; the shipped layouts' studies are checked after their tables are read.
_FENCED_KINDS = ("folder", "dicom", "manifest")
_LAYOUT_KINDS = ("nih", "mimic", "chexpert")
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
    # {"item": path relative to the source, "reason": one of REASONS, "detail"}
    failed: list[dict[str, str]] = field(default_factory=list)
    corpus: dict[str, Any] | None = None  # what the index records as its corpus (spec's if None)
    # item id -> where it came from (store/source_refs.py: server-side, never in the index)
    references: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def describe(self) -> dict[str, Any]:
        """The `corpus` entry of the index built from this source (a path source: its root's
        name and a keyed digest, never the path as typed; index/provenance.source_record)."""
        if self.corpus is not None and "root" in self.corpus:
            return {"kind": self.spec.kind, "n": self.spec.n, **self.corpus}
        return {**self.spec.describe(), **(self.corpus or {})}


def count_reasons(failed: list[dict[str, str]]) -> dict[str, int]:
    """{reason: how many}, REASONS first in their order, then any other reason."""
    counts = Counter(str(f.get("reason", "unreadable")) for f in failed)
    ordered = [r for r in REASONS if r in counts] + sorted(r for r in counts if r not in REASONS)
    return {reason: counts[reason] for reason in ordered}


def describe_failures(failed: list[dict[str, str]]) -> str:
    """'3 not an image, 1 no pixel data' (or 'none')."""
    counts = count_reasons(failed)
    return ", ".join(f"{n} {reason}" for reason, n in counts.items()) or "none"


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


def check_served_source(text: str, settings: Settings) -> None:
    """Refuse (SourceError) a source the server was asked to read from outside its roots.

    The CLI is the operator and reads any path; a job started over HTTP or from the admin
    panel (a leaked admin token, a shared admin password) may read only folders under the
    named source roots (MEDHEB_SOURCE_ROOTS) or the shipped data folder, after symbolic
    links are followed, so it cannot index a home folder or /etc. A manifest is refused
    whole when any row names a file outside them: it is a list someone wrote, and an index
    quietly missing some of its rows is not what was asked for. (A folder's links to files
    outside are skipped when the job reads it: load_source with roots_only.) The message
    names the roots, not the path typed."""
    spec = parse_source(text)
    names = ", ".join([name for name, _ in settings.source_roots] + ["shared"])
    labels = spec.labels
    if labels is None and spec.kind in ("folder", "dicom"):
        labels = _default_labels(spec.path)  # read by the build too: a link out is refused
    roots = served_roots(settings)
    for path in (spec.path, labels):
        if path is not None and not inside_roots(path, roots):
            raise SourceError(
                f"This server reads {spec.kind}: sources only under its source roots ({names}; "
                "MEDHEB_SOURCE_ROOTS names them); build this one with `index build` on the "
                "server, or add its folder as a root."
            )
    if spec.kind == "manifest" and spec.path is not None and spec.path.is_file():
        outside, total = _manifest_rows_outside(spec.path, roots)
        if outside:
            raise SourceError(
                f"{outside} of the {total} files this manifest names lie outside the server's "
                f"source roots ({names}; symbolic links followed), so nothing was queued. Name "
                "files under a root, or build this one with `index build` on the server."
            )


def _manifest_rows_outside(path: Path, roots: tuple[Path, ...]) -> tuple[int, int]:
    """(how many files the manifest's rows name outside `roots`, how many files they name).
    A manifest that cannot be read counts (0, 0): the job says why when it runs."""
    try:
        items, _ = _manifest_items(path)
    except SourceError:
        return 0, 0
    files = [_entry_file(path, entry) for entry in items.values()]
    named = [file for file in files if file is not None]
    return sum(not inside_roots(file, roots) for file in named), len(named)


def load_source(
    spec: SourceSpec | str,
    settings: Settings,
    progress: Progress | None = None,
    *,
    roots_only: bool = False,
) -> LoadedSource:
    """The studies and vocabulary of a source; EvidenceError/SourceError say what is wrong.
    `progress` gets a line now and then while a large DICOM folder's headers are read.

    `roots_only` (a job the server started, never the CLI): every file an item reads must
    lie under the server's source roots once symbolic links are followed; one that does not
    is never opened and is a line of failed.jsonl with the reason OUTSIDE_ROOTS."""
    spec = parse_source(spec) if isinstance(spec, str) else spec
    if spec.path is not None and not spec.path.exists():
        raise SourceError(f"{spec.path} does not exist (source {spec.text!r}).")
    if spec.labels is not None and not spec.labels.is_file():
        raise SourceError(f"Labels file {spec.labels} does not exist.")
    roots = served_roots(settings) if roots_only else None
    if spec.kind in _FENCED_KINDS:
        fenced = {"dicom": _dicom, "folder": _folder, "manifest": _manifest}[spec.kind]
        loaded = fenced(spec, settings, roots, progress)
    else:
        loader = {
            "phantom": _phantom,  # the server's own saved corpus (DATA_DIR): no roots apply
            "nih": _nih,
            "mimic": _mimic,
            "chexpert": _chexpert,
            "medmnist": _medmnist,  # one archive, spec.path itself (check_served_source)
        }[spec.kind]
        loaded = loader(spec, settings)
        if roots is not None and spec.kind in _LAYOUT_KINDS:
            _drop_outside(loaded, roots)
    if not loaded.studies and not loaded.failed:
        raise SourceError(f"Source {spec.kind}: has no items to index.")
    if spec.path is not None and spec.kind != "phantom":
        record = source_record(spec.kind, spec.path, settings, spec.labels)
        if spec.kind in ("folder", "dicom"):
            record["ids"] = ID_SCHEME  # keyed pseudonyms (older builds: unkeyed names)
        if spec.kind in _FENCED_KINDS:  # metadata.jsonl names no file: the references do
            record["paths"] = PATHS_BY_REFERENCE
        if loaded.references:
            name, _root = source_root(spec.path, settings)
            for reference in loaded.references.values():
                reference.setdefault("root_name", name)
                folder = spec.path.expanduser().resolve()
                reference.setdefault("root_path", str(folder if folder.is_dir() else folder.parent))
        loaded.corpus = {**(loaded.corpus or {}), **record}
    return loaded


def _drop_outside(loaded: LoadedSource, roots: tuple[Path, ...]) -> None:
    """Move the studies whose files lie outside `roots` to `loaded.failed` (named by id, the
    reason naming no path); their files have not been opened (the layouts read tables only)."""
    kept = []
    for study in loaded.studies:
        files = [study.path, *getattr(study, "files", ())]
        if all(inside_roots(Path(f), roots) for f in files if f):
            kept.append(study)
        else:
            loaded.failed.append(_outside(study.id, "a file of this item"))
    loaded.studies = kept


def _outside(item: str, what: str) -> dict[str, str]:
    """A failed.jsonl line for a file a server-started job did not read."""
    detail = f"{what} lies outside the server's source roots (symbolic links followed); not read"
    return {"item": item, "reason": OUTSIDE_ROOTS, "detail": detail}


def _fenced_labels(labels_file: Path | None, roots: tuple[Path, ...] | None) -> Path | None:
    """The labels CSV, refused (SourceError) when a server job would read it outside roots."""
    if labels_file is not None and roots is not None and not inside_roots(labels_file, roots):
        raise SourceError(
            "The labels CSV of this source lies outside the server's source roots (symbolic "
            "links followed), so it was not read; put the file itself under a root."
        )
    return labels_file


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
        {"item": str(s.meta.get("image_path")), "reason": "missing file", "detail": "not found"}
        for s in studies
        if s.path is None
    ]
    kept = [s for s in studies if s.path is not None]
    return LoadedSource(spec, kept, Vocabulary(CHEXPERT_14, "coded", "chexpert"), failed)


def _dicom(
    spec: SourceSpec,
    settings: Settings,
    roots: tuple[Path, ...] | None = None,
    progress: Progress | None = None,
) -> LoadedSource:
    """A DICOM tree, one DicomStudy per series (pixels decoded later, batch by batch); with a
    labels CSV keyed by SeriesInstanceUID, StudyInstanceUID or a file path, the CSV's own
    finding columns are the index's vocabulary. With `roots`, a file whose link leads out
    of them is not read (not even its header) and is a failed line."""
    # deferred: pydicom and its pixel handlers (`index info` reads this module)
    from medheb_app.evidence.sources.dicom_folder import load_dicom_folder

    root = spec.path
    assert root is not None
    key = pseudonym_key(settings)
    labels_file = _fenced_labels(spec.labels or _default_labels(root), roots)
    skip = frozenset({labels_file.resolve()}) if labels_file is not None else frozenset()
    members = [p for p in root.rglob("*") if p.is_file()]
    outside = [p for p in members if roots is not None and not inside_roots(p, roots)]
    skip = frozenset({*skip, *(p for p in members if p.resolve() in skip), *outside})
    try:
        folder = load_dicom_folder(
            root, namer=lambda ref: pseudonym(key, "dicom", ref), progress=progress, skip=skip
        )
    except EvidenceError as error:
        if outside and all(p in skip for p in members):  # all led out: say so, not "none"
            return LoadedSource(
                spec, [], Vocabulary(source="dicom"), [_outside_link(root, p) for p in outside]
            )
        raise SourceError(str(error)) from None
    studies = folder.studies
    failed = [*(_outside_link(root, p) for p in sorted(outside)), *folder.failed]
    vocabulary = Vocabulary(source="dicom")
    if labels_file is not None:
        table, names = _label_table(labels_file, _DICOM_KEY_COLUMNS + _PATH_COLUMNS)
        used: set[str] = set()
        for study in studies:
            reference = folder.references[study.id]
            candidates = [
                str(reference["series_uid"]),
                str(reference["study_uid"]),
                *map(str, reference["files"]),  # type: ignore[call-overload]
            ]
            found = next((c for c in candidates if c and c in table), None)
            if found is not None:  # a series without a row is indexed, unlabelled
                used.add(found)
                row = table[found]
                study.findings, study.split = dict(row["findings"]), row["split"]
        failed.extend(_rows_pointing_nowhere(table, used, labels_file))
        vocabulary = Vocabulary(names, scheme_of([s.findings for s in studies]), "dicom")
    references = {s.id: folder.references[s.id] for s in studies}
    return LoadedSource(spec, studies, vocabulary, failed, references=references)


def _outside_link(root: Path, path: Path) -> dict[str, str]:
    """A file of a folder tree whose symbolic link leads out of the roots (named relative)."""
    return _outside(path.relative_to(root).as_posix(), "the file this symbolic link names")


def _rows_pointing_nowhere(
    table: dict[str, dict[str, Any]], used: set[str], labels_file: Path
) -> list[dict[str, str]]:
    """A labels row that matched no file of the source: 'missing file', named by its key."""
    return [
        {
            "item": key,
            "reason": "missing file",
            "detail": f"row of {labels_file.name} names a file the source does not hold",
        }
        for key in table
        if key not in used
    ]


def _folder(
    spec: SourceSpec,
    settings: Settings,
    roots: tuple[Path, ...] | None = None,
    progress: Progress | None = None,
) -> LoadedSource:
    """Every file under the folder: a PNG / JPEG becomes an item named by a keyed pseudonym
    of its path relative to the folder (extension included: `a/b.png`, `a-b.png`, `c.png`
    and `c.jpg` are four items), anything else is 'not an image'. With a labels CSV, an
    image without a row is indexed unlabelled and a row without an image is 'missing file'.
    With `roots`, a file whose symbolic link leads out of them is a failed line, unread."""
    root = spec.path
    assert root is not None
    if not root.is_dir():
        raise SourceError(f"Source folder: {root.name} is not a folder of PNG / JPEG images.")
    labels_file = _fenced_labels(spec.labels or _default_labels(root), roots)
    labels_resolved = labels_file.resolve() if labels_file is not None else None
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.resolve() != labels_resolved)
    if not any(p.suffix.lower() in IMAGE_SUFFIXES for p in files):
        raise SourceError("The folder source contains no .png, .jpg or .jpeg files.")
    table: dict[str, dict[str, Any]] = {}
    names: tuple[str, ...] = ()
    if labels_file is not None:
        table, names = _label_table(labels_file, _PATH_COLUMNS)
    key = pseudonym_key(settings)
    studies: list[Study] = []
    failed: list[dict[str, str]] = []
    references: dict[str, dict[str, Any]] = {}
    used: set[str] = set()
    for path in files:
        relative = path.relative_to(root).as_posix()
        if roots is not None and not inside_roots(path, roots):
            failed.append(_outside_link(root, path))
            used.update(k for k in (relative, path.name) if k in table)  # counted once, here
            continue
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            failed.append({"item": relative, "reason": "not an image", "detail": "not PNG / JPEG"})
            continue
        match = relative if relative in table else path.name if path.name in table else None
        row: dict[str, Any] = table[match] if match is not None else {}  # no row: unlabelled
        if match is not None:
            used.add(match)
        item_id = pseudonym(key, "folder", relative)
        if item_id in references:  # HMAC-SHA256 over distinct paths: never in practice
            raise SourceError(
                f"Two files of the folder source got the same item id {item_id}; nothing was "
                "merged. Report this: it should not happen."
            )
        references[item_id] = {"kind": "file", "relative_path": relative, "files": [relative]}
        studies.append(
            Study(
                id=item_id,
                form="2d",
                modality="OT",
                path=str(path),
                findings=dict(row.get("findings", {})),
                split=row.get("split"),
                patient_id=row.get("patient_id"),
                source="folder",
                meta={"relative_path": relative, "pseudonymous": True},
            )
        )
    if labels_file is not None:
        failed.extend(_rows_pointing_nowhere(table, used, labels_file))
    scheme = scheme_of([s.findings for s in studies]) if names else "none"
    return LoadedSource(
        spec, studies, Vocabulary(names, scheme, "folder"), failed, references=references
    )


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


def load_item_manifest(
    path: Path, roots: tuple[Path, ...] | None = None
) -> tuple[list[Study], list[dict[str, str]]]:
    """Rows {"id", "image" | "volume" | "text", "findings": {name: 1|0|-1|null}, "split",
    "patient_id"}; file paths are relative to the manifest. Rows of a task manifest
    ({"query", "candidates"}) contribute their candidate items. With `roots`, a row whose
    file lies outside them is a failed line named by its id, the file not even looked at."""
    items, failed = _manifest_items(path)
    studies = []
    for item_id, entry in items.items():
        relative = entry.get("image") or entry.get("volume")
        file = _entry_file(path, entry)
        if file is None and entry.get("text") is None:
            failed.append(
                {"item": item_id, "reason": "unreadable", "detail": "no image, volume or text"}
            )
            continue
        if file is not None and roots is not None and not inside_roots(file, roots):
            failed.append(_outside(item_id, f"the file row {item_id!r} names"))
            continue
        if file is not None and not file.exists():
            failed.append(
                {
                    "item": str(relative),
                    "reason": "missing file",
                    "detail": f"row {item_id!r} of {path.name} names a file that does not exist",
                }
            )
            continue
        findings = entry.get("findings") or {}
        studies.append(
            Study(
                id=item_id,
                form="text" if file is None else ("2d" if entry.get("image") else "3d"),
                modality=str(entry.get("modality") or ("TEXT" if file is None else "OT")),
                path=str(file.resolve()) if file is not None else None,
                text=entry.get("text"),
                findings={str(k): (None if v is None else int(v)) for k, v in findings.items()},
                split=entry.get("split"),
                patient_id=entry.get("patient_id"),
                source=f"manifest:{path.stem}",
                # the index keeps no path for it: the server's source references do
                meta={"path_by_reference": file is not None},
            )
        )
    return studies, failed


def _entry_file(manifest: Path, entry: dict[str, Any]) -> Path | None:
    """The file a manifest entry names (its image or volume, relative to the manifest)."""
    relative = entry.get("image") or entry.get("volume")
    return None if relative is None else manifest.parent / relative


def _manifest_items(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The manifest's entries by id (a task manifest's candidates too) and the rows that are
    no entry; SourceError when the file cannot be read or two entries share an id."""
    # deferred: pydantic (tasks.manifest validates rows with it)
    from medheb_app.tasks.manifest import read_rows

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
                failed.append({"item": f"row {number}", "reason": "unreadable", "detail": "no id"})
                continue
            earlier = items.setdefault(str(entry["id"]), entry)
            if earlier is not entry and _content(earlier) != _content(entry):
                raise SourceError(  # a collision is an error, never a merge
                    f"{path.name} row {number}: id {entry['id']!r} is already used by another "
                    "item with a different image, volume or text; give each item its own id."
                )
    return items, failed


def _content(entry: dict[str, Any]) -> tuple[object, object, object]:
    return entry.get("image"), entry.get("volume"), entry.get("text")


def _manifest(
    spec: SourceSpec,
    settings: Settings,
    roots: tuple[Path, ...] | None = None,
    progress: Progress | None = None,
) -> LoadedSource:
    """The manifest's items; beside them, media files in their folders that no row names.
    With `roots`, rows naming files outside them are failed lines (load_item_manifest), so
    no folder outside the roots is listed either."""
    path = spec.path
    assert path is not None
    studies, failed = load_item_manifest(path, roots)
    names = _ordered_names(studies, ())
    folder = path.parent.resolve()
    listed = {Path(s.path).resolve() for s in studies if s.path is not None}
    named = listed | {
        (folder / f["item"]).resolve() for f in failed if f["reason"] == "missing file"
    }
    # image files in the folders the rows' images are in, which no row names
    folders = sorted({p.parent for p in named if p.parent.is_dir()})
    failed.extend(
        {
            "item": os.path.relpath(file, folder),
            "reason": "no manifest row",
            "detail": f"{path.name} has no row for this file",
        }
        for directory in folders
        for file in sorted(directory.iterdir())
        if file.is_file() and file.name.lower().endswith(MEDIA_SUFFIXES) and file not in named
    )
    references = {
        s.id: {"kind": "file", "relative_path": os.path.relpath(s.path, folder), "files": []}
        for s in studies
        if s.path is not None
    }
    return LoadedSource(
        spec,
        studies,
        Vocabulary(names, scheme_of([s.findings for s in studies]), f"manifest:{path.stem}"),
        failed,
        references=references,
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
    return vocabulary.describe()  # on Vocabulary, so `index info` need not import this module
