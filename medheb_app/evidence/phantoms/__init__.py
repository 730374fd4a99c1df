"""Synthetic clinical phantoms: the embedded, deterministic demo corpus (always synthetic).

- generate_chest_corpus: frontal chest radiographs with real CheXpert label rows, reports and
  finding boxes.
- generate_volume_corpus: CT, paired T1/T2 MR and CT projections of synthetic subjects.
- save_corpus / load_corpus: a manifest plus PNG / .npy files on disk.
- region_description: words for a finding box ("left lower zone pleural effusion").
"""

from medheb_app.evidence.phantoms.chest import generate_chest_corpus
from medheb_app.evidence.phantoms.corpus import load_corpus, save_corpus
from medheb_app.evidence.phantoms.regions import region_description
from medheb_app.evidence.phantoms.volumes import generate_volume_corpus

__all__ = [
    "generate_chest_corpus",
    "generate_volume_corpus",
    "load_corpus",
    "region_description",
    "save_corpus",
]
