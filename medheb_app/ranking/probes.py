"""Per-finding probes: calibrated p(finding positive | image embedding), fit on train labels.

One logistic regression per finding on a model's L2-normalised image embeddings (features
standardised, then folded back so a probe is just weights and a bias per finding). Target:
label == 1 (positive) versus anything else, i.e. CXR-Retrieve's main setting, where "no B"
holds whenever B is not positive. A finding with no positive or no non-positive training
image cannot be fit (e.g. Fracture on NIH ChestX-ray14) and is marked unfitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_EXAMPLES = 2  # positives and non-positives a finding needs to be fit


@dataclass(frozen=True)
class FindingProbe:
    """Linear probes for a vocabulary of findings on one embedding model's image vectors."""

    findings: tuple[str, ...]
    weights: np.ndarray  # (L, d)
    bias: np.ndarray  # (L,)
    fitted: np.ndarray  # (L,) bool
    model_fingerprint: str
    n_train: int
    n_positive: tuple[int, ...]

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        """(n, L) log-odds of each finding being positive; unfitted columns are NaN."""
        values = np.asarray(vectors, dtype=np.float64) @ self.weights.T + self.bias
        values[:, ~self.fitted] = np.nan
        return values

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, weights=self.weights, bias=self.bias, fitted=self.fitted)
        meta = {
            "findings": list(self.findings),
            "model_fingerprint": self.model_fingerprint,
            "n_train": self.n_train,
            "n_positive": list(self.n_positive),
        }
        path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> FindingProbe:
        arrays = np.load(path)
        meta = json.loads(path.with_suffix(".json").read_text())
        return cls(
            findings=tuple(meta["findings"]),
            weights=arrays["weights"],
            bias=arrays["bias"],
            fitted=arrays["fitted"].astype(bool),
            model_fingerprint=meta["model_fingerprint"],
            n_train=int(meta["n_train"]),
            n_positive=tuple(meta["n_positive"]),
        )


def fit_probe(
    vectors: np.ndarray,
    label_rows: Sequence[Mapping[str, object]],
    findings: Sequence[str],
    model_fingerprint: str,
    c: float = 1.0,
    seed: int = 0,
) -> FindingProbe:
    """Fit one logistic regression per finding (positive = label 1) on standardised vectors."""
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(vectors, dtype=np.float64)
    if len(x) != len(label_rows):
        raise ValueError(f"Got {len(x)} vectors for {len(label_rows)} label rows.")
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-8
    z = (x - mean) / scale
    weights = np.zeros((len(findings), x.shape[1]))
    bias = np.zeros(len(findings))
    fitted = np.zeros(len(findings), dtype=bool)
    counts = []
    for i, name in enumerate(findings):
        y = np.array([row.get(name) == 1 for row in label_rows])
        counts.append(int(y.sum()))
        if y.sum() < MIN_EXAMPLES or (~y).sum() < MIN_EXAMPLES:
            continue
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(z, y)
        weights[i] = model.coef_[0] / scale
        bias[i] = model.intercept_[0] - float(np.sum(model.coef_[0] * mean / scale))
        fitted[i] = True
    return FindingProbe(
        findings=tuple(findings),
        weights=weights,
        bias=bias,
        fitted=fitted,
        model_fingerprint=model_fingerprint,
        n_train=len(x),
        n_positive=tuple(counts),
    )
