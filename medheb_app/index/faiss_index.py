"""VectorIndex: a FAISS inner-product index over L2-normalised vectors with string ids.

Vectors are unit length, so inner product is cosine similarity (MedHEB section 3.1.1 ranks
every candidate pool by cosine). Three kinds:
- "exact": IndexFlatIP, brute force; the default and the reference for recall.
- "ivf": IVF-Flat (inverted lists over k-means cells); `nlist` cells, `nprobe` searched.
- "hnsw": HNSW graph; `m` links per node, `ef_construction`, `ef_search`.
The approximate kinds trade recall for speed on large collections; bench/bench_retrieval.py
measures their recall@10 against "exact".
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

IndexKind = Literal["exact", "ivf", "hnsw", "auto"]
INDEX_KINDS: tuple[str, ...] = ("exact", "ivf", "hnsw")
# Above this size an exact scan costs more than a text encode on a laptop core (BENCHMARKS.md)
AUTO_EXACT_LIMIT = 50_000
MANIFEST_VERSION = 1
_NORM_TOLERANCE = 1e-3


def default_nlist(count: int) -> int:
    """IVF cells: about 4 * sqrt(n) (FAISS guideline), at least 1, at most n / 39.

    FAISS k-means wants >= 39 training points per centroid to avoid degenerate cells.
    """
    return max(1, min(int(4 * math.sqrt(count)), count // 39))


def resolve_kind(kind: str, count: int) -> str:
    """'auto' is exact below AUTO_EXACT_LIMIT items and IVF-Flat from there on."""
    if kind == "auto":
        return "exact" if count < AUTO_EXACT_LIMIT else "ivf"
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

        ivf params: nlist (default 4 * sqrt(n)), nprobe (default max(16, nlist / 32)), seed (0).
        hnsw params: m (32), ef_construction (80), ef_search (64).
        """
        kind = resolve_kind(kind, len(ids))
        array = check_vectors(vectors)
        ids = [str(item) for item in ids]
        if len(ids) != array.shape[0]:
            raise ValueError(f"Got {array.shape[0]} vectors but {len(ids)} ids.")
        if len(set(ids)) != len(ids):
            duplicate = Counter(ids).most_common(1)[0][0]
            raise ValueError(f"Index ids must be unique; {duplicate!r} appears more than once.")
        if not ids:
            raise ValueError("Cannot build an index over zero items.")
        dims = array.shape[1]
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
            index.train(array)
        else:
            resolved = {
                "m": int(params.get("m", 32)),
                "ef_construction": int(params.get("ef_construction", 80)),
                "ef_search": int(params.get("ef_search", 64)),
            }
            index = faiss.IndexHNSWFlat(dims, resolved["m"], faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = resolved["ef_construction"]
        index.add(array)
        built = cls(index=index, ids=ids, kind=kind, params=resolved, fingerprint=fingerprint)
        built._apply_search_params()
        return built

    def _apply_search_params(self) -> None:
        """Search-time knobs are not all stored by faiss.write_index, so set them from params."""
        if self.kind == "ivf":
            faiss.extract_index_ivf(self.index).nprobe = int(self.params["nprobe"])
        elif self.kind == "hnsw":
            self.index.hnsw.efSearch = int(self.params["ef_search"])

    def search(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by cosine for each query: (scores (q, k) float32, ids (q, k) object).

        k is capped at the index size. An approximate index may find fewer than k items for a
        query; those slots hold id None and score -inf.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1; got {k}.")
        array = check_vectors(np.atleast_2d(queries), "query vectors")
        if array.shape[1] != self.dims:
            raise ValueError(
                f"Query vectors have {array.shape[1]} dims but the index has {self.dims}; "
                "was the index built with a different model?"
            )
        k = min(k, self.count)
        scores, rows = self.index.search(array, k)
        lookup = np.asarray([*self.ids, None], dtype=object)
        found = rows >= 0
        ids = lookup[np.where(found, rows, len(self.ids))]
        scores = np.where(found, scores, -np.inf).astype(np.float32)
        return scores, ids

    def reconstruct(self, item_id: str) -> np.ndarray:
        """The stored vector of one item (exact and HNSW; IVF needs a direct map)."""
        row = self.ids.index(item_id)
        if self.kind == "ivf":
            ivf = faiss.extract_index_ivf(self.index)
            ivf.make_direct_map()
        return self.index.reconstruct(row)

    def vectors(self) -> np.ndarray:
        """(count, dims) float32: every stored vector in id order, for scoring the whole index
        with something other than cosine (ranking/index_logic.py)."""
        if self.kind == "ivf":
            faiss.extract_index_ivf(self.index).make_direct_map()
        return np.asarray(self.index.reconstruct_n(0, self.count), dtype=np.float32)

    def manifest(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "kind": self.kind,
            "dims": self.dims,
            "count": self.count,
            "params": self.params,
            "fingerprint": self.fingerprint,
            "faiss_version": faiss.__version__,
        }

    def save(self, directory: Path) -> Path:
        """Write index.faiss, ids.json and manifest.json into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
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
        index = faiss.read_index(str(directory / "index.faiss"))
        ids = json.loads((directory / "ids.json").read_text())
        if index.ntotal != len(ids) or index.ntotal != manifest["count"]:
            raise ValueError(
                f"Index in {directory} is inconsistent: {index.ntotal} vectors, {len(ids)} ids, "
                f"manifest says {manifest['count']}. Rebuild the index."
            )
        loaded = cls(
            index=index,
            ids=ids,
            kind=manifest["kind"],
            params=manifest.get("params", {}),
            fingerprint=manifest.get("fingerprint", ""),
        )
        loaded._apply_search_params()
        return loaded
