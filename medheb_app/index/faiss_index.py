"""VectorIndex: a FAISS inner-product index over L2-normalised vectors with string ids.

Vectors are unit length, so inner product is cosine similarity (MedHEB section 3.1.1 ranks
every candidate pool by cosine). Four kinds ("auto" picks by size, resolve_kind):
- "exact": IndexFlatIP, brute force; the default and the reference for recall.
- "ivf": IVF-Flat (inverted lists over k-means cells); `nlist` cells, `nprobe` searched.
- "hnsw": HNSW graph; `m` links per node, `ef_construction`, `ef_search`.
- "ivfpq": IVF with product-quantised codes (OPQ rotation when not re-ranking), `m` bytes per
  vector instead of 4 * dims: for collections beyond RAM. Trained on a sample, filled chunk by
  chunk; when the codes exceed a memory budget the inverted lists are written to
  index.ivfdata beside index.faiss and memory-mapped (FAISS OnDiskInvertedLists). PQ codes
  only approximate the cosine, so by default the IVF-PQ shortlist of k * `rerank` candidates
  is re-scored exactly against the original vectors, kept as float16 in vectors.f16.npy
  beside the index and memory-mapped (only the candidates' rows are read; RAM stays small).
The approximate kinds trade recall for speed on large collections; bench/bench_retrieval.py
and bench/bench_scale.py measure their recall@10 against "exact". Search-time knobs (nprobe,
ef_search) are recorded with the index and can be overridden per search.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

IndexKind = Literal["exact", "ivf", "hnsw", "ivfpq", "auto"]
INDEX_KINDS: tuple[str, ...] = ("exact", "ivf", "hnsw", "ivfpq")
# auto: exact up to ~200k items, IVF-Flat up to a few million, IVF-PQ above (full float
# vectors of a few million 256-d items already take GBs of RAM).
AUTO_EXACT_LIMIT = 200_000
AUTO_IVF_LIMIT = 3_000_000
DEFAULT_MEMORY_BUDGET_MB = 2048  # IVF-PQ codes above this go to memory-mapped on-disk lists
ONDISK_FILE = "index.ivfdata"
RERANK_FILE = "vectors.f16.npy"  # IVF-PQ: the original vectors (float16) for the exact re-rank
# IVF-PQ defaults, chosen on perturbed real dual-lite embeddings: 32 PQ bytes per vector, no
# OPQ, a k * 96 shortlist re-scored exactly; the recall@10 and latency of each shortlist
# factor at 1M and 10M are in BENCHMARKS.md, "Scale: ANN kinds to 1M+" (bench/bench_scale.py).
DEFAULT_PQ_M = 32
DEFAULT_RERANK = 96
PQ_MAX_NLIST = 4096  # k-means of 4,096 cells on a 123k-row sample: minutes on 2 cores
MANIFEST_VERSION = 1
_LOCAL_PATHS = ("ondisk_path", "rerank_path")  # where files lie now: not in the manifest
_NORM_TOLERANCE = 1e-3


def default_nlist(count: int) -> int:
    """IVF cells: about 4 * sqrt(n) (FAISS guideline), at least 1, at most n / 39.

    FAISS k-means wants >= 39 training points per centroid to avoid degenerate cells.
    """
    return max(1, min(int(4 * math.sqrt(count)), count // 39))


POINTS_PER_CENTROID = 39  # FAISS k-means warns below this many training points per centroid
MIN_PQ_BITS = 4  # 16 centroids per PQ sub-quantiser; fewer approximate nothing useful
_FAISS_ERROR = re.compile(r"Error: '.*?' failed: (?P<why>.+)", re.DOTALL)


class IndexBuildError(ValueError):
    """FAISS could not build or train the index; the message is one sentence."""


def fit_kind(kind: str, count: int, params: dict[str, Any] | None = None) -> tuple[str, str]:
    """The kind an index of `count` items is built as, and a note when it is not `kind`.

    IVF and IVF-PQ train k-means centroids, which FAISS wants POINTS_PER_CENTROID training
    points each: IVF needs 2 cells (78 items), IVF-PQ 2**MIN_PQ_BITS centroids per
    sub-quantiser (624 items) unless `params` names nlist / nbits. Below that an exact index
    answers as fast and exactly, so the build falls back to it and says why."""
    params = params or {}
    resolved = resolve_kind(kind, count)
    if resolved == "ivf":
        nlist = int(params.get("nlist") or default_nlist(count))
        needed = nlist if params.get("nlist") else 2 * POINTS_PER_CENTROID
        if nlist < 2 or count < needed:
            return "exact", (
                f"IVF needs at least {max(needed, 2 * POINTS_PER_CENTROID)} items to train its "
                f"cells; built an exact index over {_items(count)} instead (as fast at this size)"
            )
    if resolved == "ivfpq":
        if "nbits" in params:
            needed = max(2 ** int(params["nbits"]), int(params.get("nlist") or 1))
        else:
            needed = POINTS_PER_CENTROID * 2**MIN_PQ_BITS
        if count < needed:
            return "exact", (
                f"IVF-PQ needs at least {needed} items to train its quantisers; built an exact "
                f"index over {_items(count)} instead (as fast at this size)"
            )
    return resolved, ""


def _items(count: int) -> str:
    return "1 item" if count == 1 else f"{count:,} items"


def pq_bits(count: int) -> int:
    """Bits per PQ code: the most (at most 8) whose 2**bits centroids get POINTS_PER_CENTROID
    training points each from `count` items, at least MIN_PQ_BITS."""
    bits = 8
    while bits > MIN_PQ_BITS and POINTS_PER_CENTROID * 2**bits > count:
        bits -= 1
    return bits


@contextmanager
def faiss_messages(what: str, notes: list[str]) -> Iterator[None]:
    """Run FAISS with its C++ stderr captured: k-means' "please provide at least N training
    points" warnings (one per sub-quantiser: 32 on a 300-item IVF-PQ) become one line in
    `notes`, other output is passed on, and a FAISS RuntimeError becomes an IndexBuildError
    saying in one sentence what FAISS could not do.

    The capture swaps file descriptor 2 for the call, so other threads' stderr in that window
    is captured too; it is written back afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except RuntimeError as error:
            raise IndexBuildError(faiss_sentence(what, error)) from None
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace")
    warnings = [line for line in text.splitlines() if "WARNING clustering" in line]
    others = [line for line in text.splitlines() if line.strip() and line not in warnings]
    if warnings:
        first = warnings[0].split("WARNING", 1)[1].strip().rstrip(".")
        notes.append(
            f"FAISS trained the {what} on fewer points than it advises "
            f"({len(warnings)} warning(s), e.g. {first}); recall may suffer"
        )
    if others:
        print("\n".join(others), file=sys.stderr)


def faiss_sentence(what: str, error: BaseException) -> str:
    """FAISS's `Error in void faiss::...(...) at file.cpp:275: Error: 'nx >= k' failed: ...`
    as one sentence: what could not be done and FAISS's own reason, without C++ signatures."""
    text = str(error).strip()
    match = _FAISS_ERROR.search(text)
    why = (match.group("why") if match else text.splitlines()[-1] if text else "").strip()
    why = why.splitlines()[0].rstrip(".") if why else type(error).__name__
    return f"FAISS could not build the {what}: {why[:1].lower() + why[1:]}."


def resolve_kind(kind: str, count: int) -> str:
    """'auto': exact below AUTO_EXACT_LIMIT items, IVF-Flat below AUTO_IVF_LIMIT, IVF-PQ above."""
    if kind == "auto":
        if count < AUTO_EXACT_LIMIT:
            return "exact"
        return "ivf" if count < AUTO_IVF_LIMIT else "ivfpq"
    if kind not in INDEX_KINDS:
        raise ValueError(
            f"Unknown index kind {kind!r}; choose one of {', '.join(INDEX_KINDS)} or auto."
        )
    return kind


def check_vectors(vectors: np.ndarray, what: str = "vectors") -> np.ndarray:
    """The (n, d) float32 C-contiguous unit-norm array FAISS needs, or a clear ValueError."""
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"{what} must be a 2D array (n, dims); got shape {array.shape}.")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} contain NaN or infinite values.")
    norms = np.linalg.norm(array, axis=1)
    # all-zero rows are allowed: l2_normalise keeps them (e.g. the oracle's empty query)
    bad = (np.abs(norms - 1.0) > _NORM_TOLERANCE) & (norms > 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{what} must be L2-normalised; row {row} has norm {norms[row]:.4f} "
            "(use medheb_app.models.base.l2_normalise)."
        )
    return array


@dataclass
class VectorIndex:
    """A FAISS index plus the string id of every row, its kind and its build parameters."""

    index: faiss.Index
    ids: list[str]
    kind: str = "exact"
    params: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _lookup: np.ndarray | None = field(default=None, repr=False, compare=False)
    _stored: np.ndarray | None = field(default=None, repr=False, compare=False)
    notes: list[str] = field(default_factory=list, repr=False, compare=False)  # build notes

    @property
    def dims(self) -> int:
        return int(self.index.d)

    @property
    def count(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        ids: list[str],
        kind: str = "exact",
        fingerprint: str = "",
        **params: Any,
    ) -> VectorIndex:
        """Index `vectors` (n, d), unit-norm float32, under `ids` (unique strings).

        kind: "exact", "ivf", "hnsw", or "auto" (see resolve_kind).

        ivf params: nlist (default 4 * sqrt(n)), nprobe (default max(16, nlist / 32)), seed (0),
        train_size (rows sampled for k-means; default min(n, 50 * nlist): k-means on all of a
        million rows would dominate the build; FAISS itself samples 256 rows per cell).
        hnsw params: m (32), ef_construction (80), ef_search (64).
        """
        kind = resolve_kind(kind, len(ids))
        array = check_vectors(vectors)
        if kind == "ivfpq":
            return cls.build_ivfpq(
                lambda: iter([array]), ids, array.shape[1], fingerprint, **params
            )
        ids = [str(item) for item in ids]
        if len(ids) != array.shape[0]:
            raise ValueError(f"Got {array.shape[0]} vectors but {len(ids)} ids.")
        if len(set(ids)) != len(ids):
            duplicate = Counter(ids).most_common(1)[0][0]
            raise ValueError(f"Index ids must be unique; {duplicate!r} appears more than once.")
        if not ids:
            raise ValueError("Cannot build an index over zero items.")
        dims = array.shape[1]
        notes: list[str] = []
        if kind == "exact":
            index: faiss.Index = faiss.IndexFlatIP(dims)
            resolved: dict[str, Any] = {}
        elif kind == "ivf":
            nlist = int(params.get("nlist") or default_nlist(len(ids)))
            nprobe = int(params.get("nprobe") or max(16, nlist // 32))
            resolved = {"nlist": nlist, "nprobe": min(nprobe, nlist), "seed": params.get("seed", 0)}
            quantiser = faiss.IndexFlatIP(dims)
            index = faiss.IndexIVFFlat(quantiser, dims, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = int(resolved["seed"])
            train_size = int(params.get("train_size") or min(len(ids), 50 * nlist))
            resolved["train_size"] = train_size
            rows = np.random.default_rng(int(resolved["seed"])).choice(
                len(ids), size=min(train_size, len(ids)), replace=False
            )
            with faiss_messages(f"IVF index over {_items(len(ids))}", notes):
                index.train(array[np.sort(rows)])
        else:
            resolved = {
                "m": int(params.get("m", 32)),
                "ef_construction": int(params.get("ef_construction", 80)),
                "ef_search": int(params.get("ef_search", 64)),
            }
            index = faiss.IndexHNSWFlat(dims, resolved["m"], faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = resolved["ef_construction"]
        with faiss_messages(f"{kind} index over {_items(len(ids))}", notes):
            index.add(array)
        built = cls(index=index, ids=ids, kind=kind, params=resolved, fingerprint=fingerprint)
        built.notes = notes
        built._apply_search_params()
        return built

    @classmethod
    def build_ivfpq(
        cls,
        chunks: Callable[[], Iterator[np.ndarray]],
        ids: list[str],
        dims: int,
        fingerprint: str = "",
        work_dir: Path | None = None,
        **params: Any,
    ) -> VectorIndex:
        """IVF-PQ over vectors that arrive in chunks (`chunks()` restarts the stream).

        params: nlist (4 * sqrt(n), at most PQ_MAX_NLIST), quantizer ("flat", or "hnsw": an
        HNSW graph over the cell centroids, the default from 4,096 cells), m (PQ bytes per
        vector; dims / 4, at most DEFAULT_PQ_M), nbits (8; fewer when there are under 256
        training rows),
        opq (an OPQ rotation before IVF-PQ; default on from 1,000 training rows when there is
        no re-rank), nprobe (max(16, nlist / 128)), train_size (rows sampled to train, default
        min(n, max(30 * nlist, 20,000), 200,000)), seed (0),
        memory_budget_mb (codes above this go to on-disk lists in `work_dir`),
        rerank (DEFAULT_RERANK: search takes a k * rerank shortlist from the PQ codes and
        re-scores it exactly with the float16 vectors written to `work_dir`; 0 keeps no
        vectors and ranks by the PQ codes alone).
        """
        ids = [str(item) for item in ids]
        count = len(ids)
        if not count:
            raise ValueError("Cannot build an index over zero items.")
        if len(set(ids)) != count:
            duplicate = Counter(ids).most_common(1)[0][0]
            raise ValueError(f"Index ids must be unique; {duplicate!r} appears more than once.")
        nlist = int(params.get("nlist") or min(default_nlist(count), PQ_MAX_NLIST))
        # assigning millions of vectors to thousands of cells by brute force dominates the
        # build: an HNSW graph over the centroids finds the cell in a few hundred products
        quantizer = str(params.get("quantizer") or ("hnsw" if nlist >= 4096 else "flat"))
        if quantizer not in ("flat", "hnsw"):
            raise ValueError(f"IVF-PQ quantizer must be 'flat' or 'hnsw'; got {quantizer!r}.")
        m = int(params.get("m") or default_pq_m(dims))
        if dims % m:
            raise ValueError(f"IVF-PQ needs m dividing the dimension; {m} does not divide {dims}.")
        nbits = int(params.get("nbits", 8))
        seed = int(params.get("seed", 0))
        budget = float(params.get("memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB))
        rerank = int(params.get("rerank", DEFAULT_RERANK))
        if rerank < 0:
            raise ValueError(f"rerank must be 0 (off) or a shortlist factor >= 1; got {rerank}.")
        train_size = int(params.get("train_size") or min(count, max(30 * nlist, 20_000), 200_000))
        sample = _sample_rows(chunks, count, min(train_size, count), seed)
        # OPQ trains its own 256-centroid PQ: only with enough rows, and by default only
        # without the re-rank (which restores more than the rotation, and OPQ's training was
        # most of a 200k build's 13 minutes on this machine)
        opq = bool(params.get("opq", len(sample) >= 1000 and not rerank))
        if "nbits" not in params:  # a small collection cannot train 256 centroids per sub-space
            while nbits > 1 and 2**nbits > len(sample):
                nbits -= 1
        rotation = f"OPQ{m}," if opq else ""
        cells = f"IVF{nlist}_HNSW32" if quantizer == "hnsw" else f"IVF{nlist}"
        factory = f"{rotation}{cells},PQ{m}x{nbits}"
        notes: list[str] = []
        what = f"IVF-PQ index over {_items(count)}"
        with faiss_messages(what, notes):
            index = faiss.index_factory(dims, factory, faiss.METRIC_INNER_PRODUCT)
            ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
            ivf.cp.seed = seed
            # the factory's IVF-PQ reorders its centroids for polysemous (Hamming) filtering,
            # which search never uses: the ranking is the same without it, and it was 95% of
            # the training time (BENCHMARKS.md, "IVF-PQ training without polysemous codes")
            ivf.do_polysemous_training = False
            index.train(sample)
        code_bytes = count * (ivf.code_size + 8)
        on_disk = code_bytes > budget * 2**20
        resolved: dict[str, Any] = {
            "nlist": nlist,
            "quantizer": quantizer,
            "m": m,
            "nbits": nbits,
            "opq": opq,
            "nprobe": min(int(params.get("nprobe") or max(16, nlist // 128)), nlist),
            "train_size": len(sample),
            "seed": seed,
            "on_disk": on_disk,
            "memory_budget_mb": budget,
            "rerank": rerank,
        }
        folder = Path(work_dir or tempfile.mkdtemp(prefix="ivfpq-"))
        folder.mkdir(parents=True, exist_ok=True)
        stored = None
        if rerank:
            resolved["rerank_dtype"] = "float16"
            resolved["rerank_path"] = str(folder / RERANK_FILE)
            stored = np.lib.format.open_memmap(
                folder / RERANK_FILE, mode="w+", dtype=np.float16, shape=(count, dims)
            )
        feed = _keeping(chunks, stored, count)
        with faiss_messages(what, notes):
            if not on_disk:
                start = 0
                for array in feed():
                    index.add_with_ids(array, np.arange(start, start + len(array), dtype=np.int64))
                    start += len(array)
            else:
                resolved["ondisk_path"] = str(_fill_on_disk(index, feed, folder))
        if index.ntotal != count:
            raise ValueError(f"Got {index.ntotal} vectors for {count} ids.")
        if stored is not None:
            stored.flush()
            del stored
        built = cls(index=index, ids=ids, kind="ivfpq", params=resolved, fingerprint=fingerprint)
        built.notes = notes
        built._open_stored()
        built._apply_search_params()
        return built

    def _open_stored(self) -> None:
        """Memory-map the float16 vectors of the exact re-rank (IVF-PQ with rerank > 0)."""
        path = self.params.get("rerank_path")
        self._stored = np.load(path, mmap_mode="r") if path else None
        if self._stored is not None and self._stored.shape != (self.count, self.dims):
            raise ValueError(
                f"{path} holds {self._stored.shape} vectors for an index of "
                f"{(self.count, self.dims)}. Rebuild the index."
            )

    def _apply_search_params(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Search-time knobs are not all stored by faiss.write_index, so set them from params
        (or from the per-search overrides)."""
        if self.kind in ("ivf", "ivfpq"):
            ivf = faiss.extract_index_ivf(self.index)
            ivf.nprobe = min(int(nprobe or self.params["nprobe"]), ivf.nlist)
            if self.params.get("quantizer") == "hnsw":  # the graph must reach nprobe cells
                cells = faiss.downcast_index(ivf.quantizer)
                cells.hnsw.efSearch = max(64, 2 * ivf.nprobe)
        elif self.kind == "hnsw":
            self.index.hnsw.efSearch = int(ef_search or self.params["ef_search"])

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rerank: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by cosine for each query: (scores (q, k) float32, ids (q, k) object).

        k is capped at the index size. An approximate index may find fewer than k items for a
        query; those slots hold id None and score -inf. `nprobe` (IVF kinds) and `ef_search`
        (HNSW) override the recorded search parameters for this search only; so does
        `rerank` (IVF-PQ built with stored vectors: shortlist factor, 0 = PQ scores only).
        """
        if k < 1:
            raise ValueError(f"k must be at least 1; got {k}.")
        for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1; got {value}.")
        if rerank is not None and rerank < 0:
            raise ValueError(f"rerank must be 0 (off) or at least 1; got {rerank}.")
        factor = int(self.params.get("rerank", 0) if rerank is None else rerank)
        if factor and self._stored is None:
            if rerank is not None:
                raise ValueError("This index keeps no vectors to re-rank with; rebuild it as "
                                 "IVF-PQ with rerank > 0.")  # fmt: skip
            factor = 0
        if nprobe is not None or ef_search is not None:
            with self._lock:
                self._apply_search_params(nprobe, ef_search)
                try:
                    return self._search(queries, k, factor)
                finally:
                    self._apply_search_params()
        return self._search(queries, k, factor)

    def _search(
        self, queries: np.ndarray, k: int, rerank: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        array = check_vectors(np.atleast_2d(queries), "query vectors")
        if array.shape[1] != self.dims:
            raise ValueError(
                f"Query vectors have {array.shape[1]} dims but the index has {self.dims}; "
                "was the index built with a different model?"
            )
        k = min(k, self.count)
        if rerank and self._stored is not None:
            scores, rows = self._rerank(array, k, rerank)
        else:
            scores, rows = self.index.search(array, k)
        if self._lookup is None or len(self._lookup) != len(self.ids) + 1:
            self._lookup = np.asarray([*self.ids, None], dtype=object)  # once, not per search
        found = rows >= 0
        ids = self._lookup[np.where(found, rows, len(self.ids))]
        scores = np.where(found, scores, -np.inf).astype(np.float32)
        return scores, ids

    def _rerank(self, array: np.ndarray, k: int, factor: int) -> tuple[np.ndarray, np.ndarray]:
        """The top k of a k * factor PQ shortlist by exact cosine with the stored vectors.

        Never worse than the shortlist's own top k: the exact top k of a superset of it."""
        stored = self._stored
        assert stored is not None
        _, shortlist = self.index.search(array, min(k * factor, self.count))
        scores = np.full((len(array), k), -np.inf, dtype=np.float32)
        rows = np.full((len(array), k), -1, dtype=np.int64)
        for i, (query, candidates) in enumerate(zip(array, shortlist, strict=True)):
            candidates = np.unique(candidates[candidates >= 0])  # sorted: sequential reads
            exact = np.asarray(stored[candidates], dtype=np.float32) @ query
            top = np.argsort(-exact, kind="stable")[:k]
            scores[i, : len(top)] = exact[top]
            rows[i, : len(top)] = candidates[top]
        _unmap_pages(stored)
        return scores, rows

    def reconstruct(self, item_id: str) -> np.ndarray:
        """The stored vector of one item (exact and HNSW; IVF needs a direct map)."""
        row = self.ids.index(item_id)
        if self.kind in ("ivf", "ivfpq"):
            ivf = faiss.extract_index_ivf(self.index)
            ivf.make_direct_map()
        return self.index.reconstruct(row)

    def vectors(self) -> np.ndarray:
        """(count, dims) float32: every stored vector in id order, for scoring the whole index
        with something other than cosine (ranking/index_logic.py); IVF-PQ gives its decoded
        (approximate) vectors."""
        if self._stored is not None:  # IVF-PQ keeping its vectors: the originals, not codes
            return np.asarray(self._stored, dtype=np.float32)
        if self.kind in ("ivf", "ivfpq"):
            faiss.extract_index_ivf(self.index).make_direct_map()
        return np.asarray(self.index.reconstruct_n(0, self.count), dtype=np.float32)

    def manifest(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "kind": self.kind,
            "dims": self.dims,
            "count": self.count,
            "params": {k: v for k, v in self.params.items() if k not in _LOCAL_PATHS},
            "fingerprint": self.fingerprint,
            "faiss_version": faiss.__version__,
        }

    def save(self, directory: Path) -> Path:
        """Write index.faiss, ids.json and manifest.json into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.params.get("on_disk"):  # the lists stay memory-mapped: move their file along
            source = Path(self.params["ondisk_path"])
            if source.resolve() != (directory / ONDISK_FILE).resolve():
                shutil.move(str(source), directory / ONDISK_FILE)
            self.params["ondisk_path"] = str(directory / ONDISK_FILE)
        if self.params.get("rerank_path"):  # the re-rank vectors too (memory-mapped)
            source = Path(self.params["rerank_path"])
            if source.resolve() != (directory / RERANK_FILE).resolve():
                self._stored = None  # release the map before the file moves
                shutil.move(str(source), directory / RERANK_FILE)
            self.params["rerank_path"] = str(directory / RERANK_FILE)
            self._open_stored()
        faiss.write_index(self.index, str(directory / "index.faiss"))
        (directory / "ids.json").write_text(json.dumps(self.ids))
        (directory / "manifest.json").write_text(json.dumps(self.manifest(), indent=2))
        return directory

    @classmethod
    def load(cls, directory: Path) -> VectorIndex:
        """Read an index written by `save`; checks the files agree with each other."""
        directory = Path(directory)
        manifest_path = directory / "manifest.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"No vector index in {directory} (manifest.json missing).")
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("version") != MANIFEST_VERSION:
            raise ValueError(
                f"Index in {directory} has manifest version {manifest.get('version')}; "
                f"this code reads version {MANIFEST_VERSION}. Rebuild the index."
            )
        on_disk = bool(manifest.get("params", {}).get("on_disk"))
        flags = faiss.IO_FLAG_ONDISK_SAME_DIR if on_disk else 0
        index = faiss.read_index(str(directory / "index.faiss"), flags)
        ids = json.loads((directory / "ids.json").read_text())
        if index.ntotal != len(ids) or index.ntotal != manifest["count"]:
            raise ValueError(
                f"Index in {directory} is inconsistent: {index.ntotal} vectors, {len(ids)} ids, "
                f"manifest says {manifest['count']}. Rebuild the index."
            )
        params = dict(manifest.get("params", {}))
        if on_disk:
            params["ondisk_path"] = str(directory / ONDISK_FILE)
        if params.get("rerank"):
            params["rerank_path"] = str(directory / RERANK_FILE)
        loaded = cls(
            index=index,
            ids=ids,
            kind=manifest["kind"],
            params=params,
            fingerprint=manifest.get("fingerprint", ""),
        )
        loaded._open_stored()
        loaded._apply_search_params()
        return loaded


def default_pq_m(dims: int) -> int:
    """PQ bytes per vector: a quarter of the dimension (4 dims per sub-quantiser), at most
    DEFAULT_PQ_M (the exact re-rank restores what fewer bytes lose), and a divisor of `dims`."""
    for m in range(min(DEFAULT_PQ_M, max(1, dims // 4)), 0, -1):
        if dims % m == 0:
            return m
    return 1


def _sample_rows(
    chunks: Callable[[], Iterator[np.ndarray]], count: int, size: int, seed: int
) -> np.ndarray:
    """`size` rows drawn uniformly without replacement from the chunk stream (one pass)."""
    chosen = np.sort(np.random.default_rng(seed).choice(count, size=size, replace=False))
    picked, start = [], 0
    for chunk in chunks():
        array = np.asarray(chunk, dtype=np.float32)
        lo, hi = np.searchsorted(chosen, [start, start + len(array)])
        if hi > lo:
            picked.append(array[chosen[lo:hi] - start])
        start += len(array)
    return check_vectors(np.concatenate(picked), "training vectors")


def _unmap_pages(stored: np.ndarray) -> None:
    """Drop this process's mappings of the re-rank file's pages (they stay in the page cache).

    The kernel maps up to 16 neighbouring cached pages on each fault, so without this every
    search would leave ~64 KB per candidate mapped and a long-running server's RSS would grow
    towards the whole file (5 GB at 10M items) although it reads a few hundred rows a query."""
    handle = getattr(stored, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


def _keeping(
    chunks: Callable[[], Iterator[np.ndarray]], stored: np.ndarray | None, count: int
) -> Callable[[], Iterator[np.ndarray]]:
    """The checked chunk stream, each chunk also written (float16) into `stored` when given."""

    def feed() -> Iterator[np.ndarray]:
        start = 0
        for chunk in chunks():
            array = check_vectors(chunk)
            if stored is not None:
                if start + len(array) > count:
                    raise ValueError(f"Got more than {count} vectors for {count} ids.")
                stored[start : start + len(array)] = array
            start += len(array)
            yield array

    return feed


def _fill_on_disk(
    index: faiss.Index, chunks: Callable[[], Iterator[np.ndarray]], work_dir: Path | None
) -> Path:
    """Add chunks to per-chunk indices written to disk, then merge their inverted lists into
    memory-mapped OnDiskInvertedLists (index.ivfdata in `work_dir`), never holding all codes."""
    from faiss.contrib.ondisk import merge_ondisk

    folder = Path(work_dir or tempfile.mkdtemp(prefix="ivfpq-"))
    folder.mkdir(parents=True, exist_ok=True)
    parts, start = [], 0
    for number, array in enumerate(chunks()):
        part = faiss.clone_index(index)
        part.add_with_ids(array, np.arange(start, start + len(array), dtype=np.int64))
        start += len(array)
        path = folder / f"part-{number:06d}.faiss"
        faiss.write_index(part, str(path))
        parts.append(str(path))
        del part
    merge_ondisk(index, parts, str(folder / ONDISK_FILE))
    for path in parts:
        Path(path).unlink()
    return folder / ONDISK_FILE
