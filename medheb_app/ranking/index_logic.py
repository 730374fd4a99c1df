"""Logic-aware search over a built index: probes fit on the index's own labelled train studies.

Beyond the paper; the search-side twin of the benchmark's logic-aware ranker (logic_aware.py).
An index keeps one whole-image vector per study, so these probes read the "whole" view set
(no crops to embed at query time). They are fit on the index's studies whose split is "train"
and that carry labels, then cached in DATA_DIR/probes under the model, the index build and the
training labels, so the first logic-aware search of an index fits for a few seconds and later
ones only load. Every study in the index is then scored with the query's logic (AND of wanted
findings, NOT of excluded ones); the score is log p(the study satisfies the query) under the
probes. On the phantom CXR-Retrieve test split this ranking over dual-lite's whole-image
vectors reached negation P@5 76.0 against 28.2 for cosine (docs/cxr-retrieve.md).

A lab's own index may have no split at all. Then the probes are fit on every labelled study.

Either way the studies the probes were fit on ("training studies") would look better than they
are: scored by a probe that saw their labels, the top of a ranking fills with them (issue 23:
in-sample hits violated the query 13-22% of the time on the real NIH sample, held-out hits
83-100%). So each training study is scored out of fold (k-fold cross-fitting: CROSS_FIT_FOLDS
probes, each fit without the fold it scores, at the C the full probe chose; cached beside the
probe file), is marked in every hit (`p_fit`: "held-out", "out-of-fold", or "in-sample" where
the out-of-fold scores are not prepared and this caller may not fit them), and is left out of
a logic-aware ranking unless the caller asks to include training studies.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.index.catalog import LoadedIndex
from medheb_app.models.base import Embedder
from medheb_app.query.parser import ParsedQuery, Setting
from medheb_app.ranking.logic_aware import LogicAwareRanker, logic_scores
from medheb_app.ranking.probes import FindingProbe, ProbeConfig, fit_probe
from medheb_app.settings import Settings

TRAIN_SPLIT = "train"
INDEX_PROBE_CONFIG = ProbeConfig(views="whole")
# Below this cross-validated AUC a finding's probe is flagged as weak. The top of a ranking
# needs far more than "better than chance" for a rare finding: on the phantom demo, Fracture's
# whole-image probe has CV AUC 0.82 on train and puts 0-1 fractures in a held-out top 5, while
# Pneumonia's (CV AUC 0.96) puts 3-4 there.
WEAK_PROBE_AUC = 0.9


@dataclass(frozen=True)
class IndexState:
    """What logic-aware search of one index build reads, none of it query-dependent.

    logits: (n, L) per-finding log-odds of every study; on training rows they are out of fold
    where `out_of_fold` says so, else from the full probe (in-sample). training: (n,) whether
    the study's labels fit the probe."""

    vectors: np.ndarray
    probe: FindingProbe
    logits: np.ndarray
    training: np.ndarray
    out_of_fold: np.ndarray

    def p_fit(self, row: int) -> str:
        """How the study's p was obtained: HELD_OUT, OUT_OF_FOLD or IN_SAMPLE."""
        if not self.training[row]:
            return HELD_OUT
        return OUT_OF_FOLD if self.out_of_fold[row] else IN_SAMPLE


@dataclass(frozen=True)
class LogicHits:
    """Top-k of a logic-aware search: scores and ids best first, how each p was obtained,
    warnings, and how many training studies were left out of the top k."""

    scores: np.ndarray
    ids: np.ndarray
    p_fit: tuple[str, ...]
    notes: list[str]
    left_out: int


_LOCK = threading.Lock()
_LOADED: dict[str, tuple[tuple, IndexState]] = {}
_HAS_TRAIN: dict[str, tuple[tuple, bool]] = {}
_generation = 0  # logic states installed in _LOADED by this process


def generation() -> int:
    """How many logic states (probes, logits) this process has installed: an answer made
    before a state was installed or replaced may differ from one made after (api/answers.py)."""
    return _generation


HELD_OUT, OUT_OF_FOLD, IN_SAMPLE = "held-out", "out-of-fold", "in-sample"


class IndexLogicError(ValueError):
    """The index cannot be ranked with logic (e.g. no labelled training studies)."""


class ProbesNotReady(IndexLogicError):
    """The probes were not fit in advance and this caller may not fit them (a web request)."""


CROSS_FIT_FOLDS = 5


def labelled_rows(loaded: LoadedIndex, vocabulary: tuple[str, ...]) -> list[int]:
    """Row positions of the index's 2D studies whose source labels any vocabulary finding."""
    rows = []
    for row, item_id in enumerate(loaded.index.ids):
        item = loaded.items.get(item_id, {})
        findings = item.get("findings") or {}
        if item.get("form", "2d") == "2d" and any(name in findings for name in vocabulary):
            rows.append(row)
    return rows


def probe_rows(loaded: LoadedIndex, vocabulary: tuple[str, ...]) -> tuple[list[int], str]:
    """(rows the probes fit on, how): the labelled train split when the source has one
    ("split"), else every labelled study with out-of-fold scores ("cross-fit")."""
    train = labelled_train_rows(loaded, vocabulary)
    if train:
        return train, "split"
    return labelled_rows(loaded, vocabulary), "cross-fit"


def labelled_train_rows(loaded: LoadedIndex, vocabulary: tuple[str, ...]) -> list[int]:
    """Row positions of the index's train-split 2D studies whose source labels the vocabulary.

    A study counts when its findings name any vocabulary finding, even with no value: NIH
    ChestX-ray14 leaves every finding blank on a normal film, and such films are the probes'
    negatives (positive = label 1, as in the benchmark). Studies with no findings at all (an
    unlabelled DICOM folder) are left out.
    """
    rows = []
    for row, item_id in enumerate(loaded.index.ids):
        item = loaded.items.get(item_id, {})
        findings = item.get("findings") or {}
        labelled = any(name in findings for name in vocabulary)
        if item.get("split") == TRAIN_SPLIT and item.get("form", "2d") == "2d" and labelled:
            rows.append(row)
    return rows


def index_probe_path(
    settings: Settings, embedder: Embedder, loaded: LoadedIndex, rows: list[int]
) -> Path:
    """Where the probe for (model, index build, its training labels) is kept."""
    digest = hashlib.sha1(f"{loaded.name}:{loaded.fingerprint}".encode())
    for row in rows:
        item_id = loaded.index.ids[row]
        findings = loaded.items[item_id].get("findings") or {}
        digest.update(json.dumps([item_id, findings], sort_keys=True).encode())
    name = f"{embedder.card.fingerprint}-index-{digest.hexdigest()[:12]}"
    return settings.data_dir / "probes" / f"{name}-{INDEX_PROBE_CONFIG.key()}.npz"


def index_probe(
    loaded: LoadedIndex,
    embedder: Embedder,
    settings: Settings,
    vectors: np.ndarray,
    vocabulary: tuple[str, ...] = CXR_RETRIEVE_10,
    fit: bool = True,
) -> FindingProbe:
    """The per-finding probe for this index, fit on its labelled train studies once (or, with
    no train split, on every labelled study; see probe_rows).

    With fit=False a probe that is not on disk raises ProbesNotReady instead of being fit."""
    rows, _how = probe_rows(loaded, vocabulary)
    if not rows:
        raise IndexLogicError(
            f"Index {loaded.name!r} has no studies labelled with these findings to fit "
            "finding probes on; rank it by similarity instead."
        )
    path = index_probe_path(settings, embedder, loaded, rows)
    if path.is_file():
        probe = FindingProbe.load(path)
        if probe.cv_auc:  # files from before probes kept their CV AUC are refit
            return probe
    if not fit:
        raise ProbesNotReady(f"The finding probes of index {loaded.name!r} are not prepared.")
    labels = [loaded.items[loaded.index.ids[row]].get("findings") or {} for row in rows]
    probe = fit_probe(
        vectors[rows], labels, vocabulary, embedder.card.fingerprint, INDEX_PROBE_CONFIG
    )
    probe.save(path)
    return probe


def _index_state(
    loaded: LoadedIndex,
    embedder: Embedder,
    settings: Settings,
    vocabulary: tuple[str, ...],
    fit: bool = True,
) -> IndexState:
    """The index's IndexState, kept in memory per index build.

    None of it depends on the query, and finding the probe file alone hashes every train
    label (tens of ms on 2,000 studies), too slow to repeat per query.
    """
    global _generation
    index_file = loaded.directory / "index.faiss"
    stamp = index_file.stat().st_mtime_ns if index_file.is_file() else 0
    version = (stamp, embedder.card.fingerprint, vocabulary, str(settings.data_dir))
    with _LOCK:  # concurrent first searches (app users) fit and write the probe file once
        held = _LOADED.get(str(loaded.directory))
        if held is not None and held[0] == version and (held[1].out_of_fold.any() or not fit):
            return held[1]
        vectors = loaded.index.vectors()
        probe = index_probe(loaded, embedder, settings, vectors, vocabulary, fit)
        ranker = LogicAwareRanker(embedder, probe, vocabulary=vocabulary)
        logits = ranker.finding_logits(vectors, vectors)
        rows, _how = probe_rows(loaded, vocabulary)
        training = np.zeros(len(vectors), dtype=bool)
        training[rows] = True
        out_of_fold = np.zeros(len(vectors), dtype=bool)
        crossed = out_of_fold_logits(loaded, embedder, settings, logits, vectors, rows, probe, fit)
        if crossed is not None:
            logits[rows] = crossed
            out_of_fold[rows] = True
        state = IndexState(vectors, probe, logits, training, out_of_fold)
        _LOADED[str(loaded.directory)] = (version, state)  # a rebuild replaces the entry
        _generation += 1
    return state


def out_of_fold_logits(
    loaded: LoadedIndex,
    embedder: Embedder,
    settings: Settings,
    logits: np.ndarray,
    vectors: np.ndarray,
    rows: list[int],
    probe: FindingProbe,
    fit: bool = True,
) -> np.ndarray | None:
    """(len(rows), L) out-of-fold log-odds of the training rows (cross_fit_logits), cached
    beside the probe file; None when they are not on disk and fit=False (a web request)."""
    path = index_probe_path(settings, embedder, loaded, rows)
    cached = path.parent / "out-of-fold" / path.name
    if cached.is_file():
        arrays = np.load(cached)
        if arrays["rows"].tolist() == list(rows):
            return arrays["logits"]
    if not fit:
        return None
    labels = [loaded.items[loaded.index.ids[row]].get("findings") or {} for row in rows]
    crossed = cross_fit_logits(logits.copy(), vectors, rows, labels, probe)[rows]
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.stem}.partial.npz")
    np.savez(partial, rows=np.asarray(rows, dtype=np.int64), logits=crossed)
    partial.replace(cached)  # a reader never sees half a file
    return crossed


def training_ids(loaded: LoadedIndex, vocabulary: tuple[str, ...], ids: list[str]) -> list[bool]:
    """Whether each of `ids` is a study the index's probes are fit on (probe_rows), without
    reading every row: the labelled train split if the index has one, else every labelled
    2D study. Used to mark similarity hits, where no probe state is loaded."""
    index_file = loaded.directory / "index.faiss"
    stamp = index_file.stat().st_mtime_ns if index_file.is_file() else 0
    version = (stamp, vocabulary)
    with _LOCK:
        known = _HAS_TRAIN.get(str(loaded.directory))
        if known is None or known[0] != version:
            has_train = any(_labelled(item, vocabulary) and item.get("split") == TRAIN_SPLIT
                            for item in loaded.items.values())  # fmt: skip
            known = (version, has_train)
            _HAS_TRAIN[str(loaded.directory)] = known
    marks = []
    for item_id in ids:
        item = loaded.items.get(item_id, {})
        in_split = item.get("split") == TRAIN_SPLIT or not known[1]
        marks.append(_labelled(item, vocabulary) and in_split)
    return marks


def _labelled(item: dict, vocabulary: tuple[str, ...]) -> bool:
    findings = item.get("findings") or {}
    return item.get("form", "2d") == "2d" and any(name in findings for name in vocabulary)


def cross_fit_logits(
    logits: np.ndarray,
    vectors: np.ndarray,
    rows: list[int],
    labels: list[dict],
    probe: FindingProbe,
    folds: int = CROSS_FIT_FOLDS,
    seed: int = 0,
) -> np.ndarray:
    """Overwrite `logits[rows]` for every fitted finding with out-of-fold log-odds, in place.

    Each labelled study is scored by a probe fit on the other folds (same C as the full
    probe), so a study's own label never shapes its score. Folds are stratified per finding.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    x = np.asarray(vectors[rows], dtype=np.float64)
    for i, name in enumerate(probe.findings):
        if not probe.fitted[i]:
            continue
        y = np.array([row.get(name) == 1 for row in labels])
        k = min(folds, int(y.sum()), int((~y).sum()))
        if k < 2:
            continue
        c = float(probe.c[i]) if i < len(probe.c) and probe.c[i] > 0 else 1.0
        splitter = StratifiedKFold(k, shuffle=True, random_state=seed)
        for fit, held in splitter.split(x, y):
            mean, scale = x[fit].mean(axis=0), x[fit].std(axis=0) + 1e-8
            model = LogisticRegression(C=c, max_iter=5000, random_state=seed)
            model.fit((x[fit] - mean) / scale, y[fit])
            held_rows = [rows[j] for j in held]
            logits[held_rows, i] = model.decision_function((x[held] - mean) / scale)
    return logits


def prepare_index_logic(
    loaded: LoadedIndex,
    embedder: Embedder,
    settings: Settings,
    vocabulary: tuple[str, ...] = CXR_RETRIEVE_10,
) -> str | None:
    """Fit (or load) the index's probes and keep them in memory, so the first logic-aware
    search answers at once. Called by the index builder (index/build.py), never a web request.
    None when prepared; else the reason in words (no labelled training studies: the index is
    ranked by similarity)."""
    if "text" not in embedder.card.modalities:
        return (
            f"Model {embedder.card.name} reads no text, so a text query cannot be ranked "
            "with logic; ranked by similarity."
        )
    try:
        _index_state(loaded, embedder, settings, vocabulary, fit=True)
    except IndexLogicError as error:
        return str(error)
    return None


def probe_notes(probe: FindingProbe, parsed: ParsedQuery) -> list[str]:
    """One warning per constraint whose probe is missing or weak, so a user knows which part
    of the ranking to distrust (e.g. Fracture on the phantom demo index)."""
    notes = []
    column = {name: i for i, name in enumerate(probe.findings)}
    for name in (*parsed.positive, *parsed.negative):
        i = column[name]
        positives = probe.n_positive[i]
        if not probe.fitted[i]:
            notes.append(
                f"{name}: too few labelled training studies in this index to fit a probe "
                f"({positives} positive of {probe.n_train}); it is scored by each image's "
                "similarity to the word instead, which is weak."
            )
        elif i < len(probe.cv_auc) and probe.cv_auc[i] < WEAK_PROBE_AUC:
            notes.append(
                f"{name}: the probe for this finding is weak on this index (cross-validated "
                f"AUC {math.floor(100 * probe.cv_auc[i]) / 100:.2f} over {positives} positive "
                f"training studies; below {WEAK_PROBE_AUC} the top of a ranking is unreliable "
                "for it)."
            )
    return notes


def logic_search(
    loaded: LoadedIndex,
    embedder: Embedder,
    parsed: ParsedQuery,
    query_vector: np.ndarray,
    k: int,
    settings: Settings,
    fit: bool = True,
    setting: Setting = "main",
    include_training: bool = False,
) -> LogicHits:
    """Top-k of every study in the index by the parsed query's logic, with how each hit's p
    was obtained and warnings about the probes of the query's findings (probe_notes).

    `query_vector` is the query's embedding; its cosine to each study only breaks ties.
    fit=False (a web request) raises ProbesNotReady rather than fitting probes. `setting`
    (main / strict) says what an uncertain finding of the query asks (logic_scores). The
    studies the probes were fit on are left out unless `include_training`; included, they are
    scored out of fold (or marked in-sample where those scores are not prepared).
    """
    state = _index_state(loaded, embedder, settings, parsed.vocabulary, fit)
    query = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    # einsum, not BLAS: a threaded BLAS call here leaves spinning threads that slow down the
    # next query's text encoder (measured p50 11 -> 24 ms).
    similarity = np.einsum("nd,d->n", state.vectors, query)
    scores = logic_scores(parsed, state.logits, state.probe.findings, similarity, setting=setting)
    k = min(int(k), len(scores))
    left_out = 0
    if include_training:
        top = np.argsort(-scores, kind="stable")[:k]
    else:
        order = np.argsort(-scores, kind="stable")
        left_out = int(state.training[order[:k]].sum())
        top = order[~state.training[order]][:k]
    ids = np.asarray([loaded.index.ids[row] for row in top], dtype=object)
    marks = tuple(state.p_fit(int(row)) for row in top)
    notes = probe_notes(state.probe, parsed)
    return LogicHits(scores[top].astype(np.float32), ids, marks, notes, left_out)
