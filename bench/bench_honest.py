"""How honest is logic-aware search on real films? Violations per 100 hits, by how p was fit.

Issue 23 item 4. Builds the real NIH ChestX-ray14 sample (../shared/data/nih-cxr14-1000)
into the MIMIC-CXR-JPG layout (files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg with the
chexpert, split and metadata tables; NIH labels mapped onto CheXpert's names, positive-only,
patients re-split 70/30 by load_nih), indexes it with `index build --source mimic:...`, and
for a few compositional queries counts, in the top 10 of logic-aware search, the hits that
violate the query (its true labels break a constraint), per 100 hits:

- before (what search did until issue 23): every study ranked with the full probe, so the
  probes' own training studies are scored in-sample; violations among those hits and among
  held-out hits;
- after, default: training studies left out (the hits are held-out studies);
- after, --include-training: training studies scored out of fold (cross-fitted).

"chance" is the share of all studies that violate the query. Run:

    DATA_DIR=/tmp/honest-data OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_honest \
        [--nih ../shared/data/nih-cxr14-1000] [--root /tmp/honest-mimic] [--model dual-lite]

The root it writes is the `mimic:` source of the README's real-data figures
(`cxr-retrieve eval --data mimic:ROOT --split test`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.mimic import study_folder
from medheb_app.evidence.sources.nih import load_nih
from medheb_app.index.build import build_from_source
from medheb_app.index.catalog import IndexNotFoundError, load_index, query_vocabulary
from medheb_app.models import registry
from medheb_app.query.parser import parse_query, satisfies
from medheb_app.ranking.index_logic import _index_state
from medheb_app.ranking.logic_aware import LogicAwareRanker, logic_scores
from medheb_app.search import search
from medheb_app.settings import Settings

QUERIES = (
    "pleural effusion and no cardiomegaly",
    "atelectasis and no pleural effusion",
    "lung opacity and no atelectasis",
    "cardiomegaly and pleural effusion",
    "pleural effusion and no lung opacity",
    "lung lesion and no lung opacity",
)
TOP = 10


def write_mimic_layout(nih: Path, root: Path) -> int:
    """The NIH sample in the MIMIC-CXR-JPG layout under `root`; returns the image count."""
    studies = load_nih(nih)  # re-split by patient (70 / 30), positive-only labels
    labels, splits, meta = [], [], []
    for study in studies:
        stem = str(study.meta["image_index"]).rsplit(".", 1)[0]
        patient, follow_up = (int(part) for part in stem.split("_"))
        subject, study_id = 10_000_000 + patient, 50_000_000 + patient * 1000 + follow_up
        row: dict[str, float | int] = {"subject_id": subject, "study_id": study_id}
        row.update(dict.fromkeys(CHEXPERT_14, np.nan))
        positives = [name for name, value in study.findings.items() if value == 1]
        for name in positives:
            row[name] = 1.0
        if not study.meta["nih_labels"]:
            row["No Finding"] = 1.0
        labels.append(row)
        split = "test" if study.split == "test" else "train"
        ids = {"dicom_id": stem, "study_id": study_id, "subject_id": subject}
        splits.append({**ids, "split": split})
        meta.append({"dicom_id": stem, "subject_id": subject, "study_id": study_id,
                     "ViewPosition": study.meta.get("view") or "PA"})  # fmt: skip
        folder = study_folder(root, subject, study_id)
        folder.mkdir(parents=True, exist_ok=True)
        image = folder / f"{stem}.jpg"
        if not image.is_file():
            Image.open(study.path).convert("L").save(image, quality=95)
    pd.DataFrame(labels).to_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", index=False)
    pd.DataFrame(splits).to_csv(root / "mimic-cxr-2.0.0-split.csv.gz", index=False)
    pd.DataFrame(meta).to_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", index=False)
    return len(studies)


def per_100(broken: int, hits: int) -> float | None:
    return round(100 * broken / hits, 1) if hits else None


def measure(settings: Settings, index: str, model: str) -> dict:
    """Violations per 100 top-10 hits, before / after, per query and over all queries."""
    embedder = registry.load_embedder(model, settings)
    loaded = load_index(index, embedder, settings)
    vocabulary = query_vocabulary(loaded)
    state = _index_state(loaded, embedder, settings, vocabulary, fit=True)
    ranker = LogicAwareRanker(embedder, state.probe, vocabulary=vocabulary)
    in_sample = ranker.finding_logits(state.vectors, state.vectors)  # the full probe on all
    items = [loaded.items[item_id] for item_id in loaded.index.ids]
    total = {key: [0, 0] for key in ("before_training", "before_held_out", "after_default",
                                     "after_training_out_of_fold", "chance")}  # fmt: skip
    rows = []
    for query in QUERIES:
        parsed = parse_query(query, vocabulary)
        vector = embedder.encode([query])[0]
        similarity = state.vectors @ np.asarray(vector, dtype=np.float32)
        old = logic_scores(parsed, in_sample, state.probe.findings, similarity)
        top = np.argsort(-old, kind="stable")[:TOP]
        ok = np.array([satisfies(item.get("findings") or {}, parsed) for item in items])
        counts = {
            "before_training": [int((~ok[top] & state.training[top]).sum()),
                                int(state.training[top].sum())],
            "before_held_out": [int((~ok[top] & ~state.training[top]).sum()),
                                int((~state.training[top]).sum())],
            "chance": [int((~ok).sum()), len(ok)],
        }  # fmt: skip
        default = search(query_text=query, model_spec=model, index=index, k=TOP,
                         settings=settings, ranking="logic")  # fmt: skip
        counts["after_default"] = [sum(h.satisfies is False for h in default.results),
                                   len(default.results)]  # fmt: skip
        shown = search(query_text=query, model_spec=model, index=index, k=TOP,
                       settings=settings, ranking="logic", include_training=True)  # fmt: skip
        crossed = [h for h in shown.results if h.p_fit == "out-of-fold"]
        counts["after_training_out_of_fold"] = [sum(h.satisfies is False for h in crossed),
                                                len(crossed)]  # fmt: skip
        for key, (broken, hits) in counts.items():
            total[key][0] += broken
            total[key][1] += hits
        rows.append({"query": query, **{k: per_100(*v) for k, v in counts.items()},
                     "hits": {k: v[1] for k, v in counts.items() if k != "chance"}})  # fmt: skip
    summary = {key: per_100(*value) for key, value in total.items()}
    summary["hits"] = {key: value[1] for key, value in total.items() if key != "chance"}
    return {"queries": rows, "all": summary, "n_training": int(state.training.sum()),
            "n_studies": len(items)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nih", type=Path, default=Path("../shared/data/nih-cxr14-1000"))
    parser.add_argument("--root", type=Path, default=Path("/tmp/honest-mimic"))
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--index", default="nih-mimic")
    args = parser.parse_args(argv)
    if not args.nih.is_dir():
        print(f"The NIH sample is not at {args.nih}; pass --nih.", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    args.root.mkdir(parents=True, exist_ok=True)
    count = write_mimic_layout(args.nih, args.root)
    print(f"MIMIC-CXR-JPG layout of {count} NIH films at {args.root}", file=sys.stderr)
    try:
        load_index(args.index, registry.load_embedder(args.model, settings), settings)
    except IndexNotFoundError:  # not built yet: build it the way a lab would
        build_from_source(f"mimic:{args.root}", args.model, args.index, settings)
    print(json.dumps(measure(settings, args.index, args.model), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
