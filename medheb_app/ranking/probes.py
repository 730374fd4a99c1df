"""Per-finding probes: calibrated p(finding positive | image features), fit on train labels.

One logistic regression per finding on a model's image features (the L2-normalised embedding
of the whole image, optionally followed by the embeddings of zoomed crops: the view set,
ranking/views.py),
standardised, then folded back so a probe is just weights and a bias per finding. The inverse
regularisation C is chosen per finding by stratified k-fold cross-validated ROC AUC on the
training split (findings differ: Lung Opacity has 750 positives in the phantom train split,
Pneumonia 36). Target: label == 1 (positive) versus anything else, i.e. CXR-Retrieve's main
setting, where "no B" holds whenever B is not positive. A finding with too few positive or
non-positive training images cannot be fit (e.g. Fracture on NIH ChestX-ray14) and is marked
unfitted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from medheb_app.ranking.views import DEFAULT_VIEWS, VIEW_SETS, check_views

MIN_EXAMPLES = 2  # positives and non-positives a finding needs to be fit
C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


@dataclass(frozen=True)
class ProbeConfig:
    """How probes are fit; part of the probe file's cache key, so a change refits."""

    views: str = DEFAULT_VIEWS  # zoomed-crop embeddings read with the whole image (VIEW_SETS)
    c_grid: tuple[float, ...] = C_GRID
    folds: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.c_grid or min(self.c_grid) <= 0:
            raise ValueError("c_grid needs at least one positive C.")
        if self.folds < 2:
            raise ValueError("folds must be at least 2.")
        check_views(self.views)

    def key(self) -> str:
        """A short digest of every setting, with the crop geometry of the view set."""
        settings = asdict(self)
        settings["crop_geometry"] = [list(grid) for grid in VIEW_SETS[self.views]]
        text = json.dumps(settings, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class FindingProbe:
    """Linear probes for a vocabulary of findings on one embedding model's image features."""

    findings: tuple[str, ...]
    weights: np.ndarray  # (L, d)
    bias: np.ndarray  # (L,)
    fitted: np.ndarray  # (L,) bool
    model_fingerprint: str
    n_train: int
    n_positive: tuple[int, ...]
    views: str = "whole"  # what the probe reads besides the whole image (VIEW_SETS)
    c: tuple[float, ...] = ()  # the C chosen per finding (0 where unfitted)
    cv_auc: tuple[float, ...] = ()  # its cross-validated ROC AUC (NaN: unfitted or no CV)

    def logits(self, features: np.ndarray) -> np.ndarray:
        """(n, L) log-odds of each finding being positive; unfitted columns are NaN."""
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.weights.shape[1]:
            raise ValueError(
                f"This probe reads {self.weights.shape[1]}-d features; got shape {features.shape}."
            )
        values = features @ self.weights.T + self.bias
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
            "views": self.views,
            "c": list(self.c),
            "cv_auc": [None if np.isnan(value) else value for value in self.cv_auc],
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
            views=str(meta.get("views") or ("2x2" if meta.get("crops") else "whole")),
            c=tuple(meta.get("c", ())),
            cv_auc=tuple(np.nan if v is None else float(v) for v in meta.get("cv_auc", ())),
        )


def fit_probe(
    features: np.ndarray,
    label_rows: Sequence[Mapping[str, object]],
    findings: Sequence[str],
    model_fingerprint: str,
    config: ProbeConfig | None = None,
) -> FindingProbe:
    """Fit one logistic regression per finding (positive = label 1), C by cross-validation."""
    config = config or ProbeConfig()
    x = np.asarray(features, dtype=np.float64)
    if len(x) != len(label_rows):
        raise ValueError(f"Got {len(x)} feature rows for {len(label_rows)} label rows.")
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-8
    z = (x - mean) / scale
    weights = np.zeros((len(findings), x.shape[1]))
    bias = np.zeros(len(findings))
    fitted = np.zeros(len(findings), dtype=bool)
    counts, chosen, aucs = [], [], []
    for i, name in enumerate(findings):
        y = np.array([row.get(name) == 1 for row in label_rows])
        counts.append(int(y.sum()))
        if y.sum() < MIN_EXAMPLES or (~y).sum() < MIN_EXAMPLES:
            chosen.append(0.0)
            aucs.append(np.nan)
            continue
        coef, intercept, c, auc = _fit_one(z, y, config)
        weights[i] = coef / scale
        bias[i] = intercept - float(np.sum(coef * mean / scale))
        fitted[i] = True
        chosen.append(c)
        aucs.append(auc)
    return FindingProbe(
        findings=tuple(findings),
        weights=weights,
        bias=bias,
        fitted=fitted,
        model_fingerprint=model_fingerprint,
        n_train=len(x),
        n_positive=tuple(counts),
        views=config.views,
        c=tuple(chosen),
        cv_auc=tuple(aucs),
    )


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC as the Mann-Whitney statistic: the chance a positive outscores a non-positive,
    ties counted half (average ranks); NaN when either class is absent. Equal to scikit-learn's
    roc_auc_score without its per-call input checks, which the probe's cross-validation (35
    AUCs per finding) paid for on every call (BENCHMARKS.md, "Probe fit")."""
    from scipy.stats import rankdata  # deferred like scikit-learn below: only a fit needs it

    positive = np.asarray(positive, dtype=bool)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _roc_auc_scorer(model: object, z: np.ndarray, y: np.ndarray) -> float:
    """scikit-learn's scorer contract (estimator, X, y) over roc_auc of the decision values."""
    return roc_auc(model.decision_function(z), y)  # type: ignore[attr-defined]


def _fit_one(
    z: np.ndarray, y: np.ndarray, config: ProbeConfig
) -> tuple[np.ndarray, float, float, float]:
    """Weights, intercept, C and cross-validated ROC AUC (NaN without CV) of one finding's
    logistic regression on standardised z."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    folds = min(config.folds, int(y.sum()), int((~y).sum()))  # >= MIN_EXAMPLES
    if len(config.c_grid) == 1:
        c = float(config.c_grid[0])
        model = LogisticRegression(C=c, max_iter=5000, random_state=config.seed).fit(z, y)
        return model.coef_[0], float(model.intercept_[0]), c, float("nan")
    split = StratifiedKFold(folds, shuffle=True, random_state=config.seed)
    model = LogisticRegressionCV(
        Cs=list(config.c_grid),
        cv=split,
        scoring=_roc_auc_scorer,
        max_iter=5000,
        random_state=config.seed,
        l1_ratios=(0.0,),  # plain L2, said explicitly (scikit-learn 1.10 changes the default)
        use_legacy_attributes=False,
    ).fit(z, y)
    auc = float(np.asarray(model.scores_).mean(axis=0).max())  # (folds, l1_ratios, Cs)
    return model.coef_[0], float(model.intercept_[0]), float(np.ravel(model.C_)[0]), auc
