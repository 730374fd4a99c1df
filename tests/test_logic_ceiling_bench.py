"""The logic-ceiling diagnostic's helpers: per-finding P@5 (shared with the eval) and ROC AUC."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from bench.logic_ceiling import roc_auc
from medheb_app.eval.cxr_tables import p5_by_finding


def test_negation_precision_is_averaged_per_required_finding() -> None:
    def query(kind: str, positive: str, p5: float) -> dict:
        return {"kind": kind, "positives": [positive], "metrics_main": {"P@5": p5}}

    report = SimpleNamespace(
        queries=[
            query("negation", "Fracture", 0.2),
            query("negation", "Fracture", 0.4),
            query("negation", "Edema", 1.0),
            query("single", "Fracture", 0.0),  # not a negation query: ignored
        ]
    )
    result = p5_by_finding(report, "negation")
    assert set(result) == {"Fracture", "Edema"}
    assert math.isclose(result["Fracture"], 30.0) and math.isclose(result["Edema"], 100.0)
    assert p5_by_finding(report, "single") == {"Fracture": 0.0}


def test_roc_auc_is_undefined_without_both_classes() -> None:
    assert math.isnan(roc_auc(np.array([True, True]), np.array([0.1, 0.2])))
    assert roc_auc(np.array([False, True, True]), np.array([0.1, 0.3, 0.2])) == 1.0
