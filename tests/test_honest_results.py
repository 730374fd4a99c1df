"""Issue 23 items 4 and 5 through the CLI: training studies marked, left out of a logic-aware
ranking unless asked, scored out of fold; queries an index cannot answer refused (exit 2).

The index is built by `index build --source mimic:...` from a fixture in the exact
MIMIC-CXR-JPG layout (gzipped chexpert / split / metadata tables, JPGs under
files/pXX/pNNNNNNNN/sNNNNNNNN/) with the "random" model: its image vectors are noise, so a
probe fit on them memorises its training labels, which is exactly the in-sample optimism the
issue is about (in-sample AUC near 1, out of fold near 0.5).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medheb_app.cli import main
from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.mimic import study_folder
from medheb_app.index.catalog import load_index, query_vocabulary
from medheb_app.models import registry
from medheb_app.search import SearchError, search
from medheb_app.settings import Settings

QUERY = "pleural effusion and no cardiomegaly"
N_STUDIES, N_TEST = 90, 30


def write_mimic(root: Path, seed: int = 7) -> None:
    """N_STUDIES frontal films, one per study and patient, the last N_TEST in the test split;
    Pleural Effusion and Cardiomegaly coded 1 / 0 at random (about 40% positive)."""
    rng = np.random.default_rng(seed)
    labels, splits, meta = [], [], []
    for i in range(N_STUDIES):
        subject, study, dicom = 10_000_000 + i, 50_000_000 + i, f"{i:08x}-honest"
        row = {"subject_id": subject, "study_id": study, **dict.fromkeys(CHEXPERT_14, np.nan)}
        row["Pleural Effusion"] = float(rng.random() < 0.4)
        row["Cardiomegaly"] = float(rng.random() < 0.4)
        labels.append(row)
        split = "test" if i >= N_STUDIES - N_TEST else "train"
        splits.append({"dicom_id": dicom, "study_id": study, "subject_id": subject, "split": split})
        meta.append({"dicom_id": dicom, "subject_id": subject, "study_id": study,
                     "ViewPosition": "PA"})  # fmt: skip
        folder = study_folder(root, subject, study)
        folder.mkdir(parents=True)
        pixels = rng.integers(0, 255, (24, 20), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{dicom}.jpg")
    pd.DataFrame(labels).to_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", index=False)
    pd.DataFrame(splits).to_csv(root / "mimic-cxr-2.0.0-split.csv.gz", index=False)
    pd.DataFrame(meta).to_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", index=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """DATA_DIR with index "own" (the MIMIC fixture) and "plain" (a folder without labels)."""
    base = tmp_path_factory.mktemp("honest")
    settings = Settings(data_dir=base / "data")
    mimic = base / "mimic"
    mimic.mkdir()
    write_mimic(mimic)
    plain = base / "plain"
    plain.mkdir()
    rng = np.random.default_rng(3)
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (20, 20), dtype=np.uint8)).save(plain / f"{i}.png")
    patch = pytest.MonkeyPatch()
    patch.setenv("DATA_DIR", str(settings.data_dir))
    for source, name in ((f"mimic:{mimic}", "own"), (f"folder:{plain}", "plain")):
        command = ["index", "build", "--source", source, "--model", "random", "--name", name]
        assert main(command) == 0
    yield settings
    patch.undo()


def _search_json(capsys, *extra: str, text: str = QUERY) -> dict:
    args = ["search", "--index", "own", "--model", "random", "--text", text, "--k", "10"]
    assert main([*args, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_json_leaves_training_studies_out_by_default_and_marks_them(built, capsys) -> None:
    default = _search_json(capsys, "--ranking", "logic")
    hits = default["results"]
    assert default["ranking"] == "logic" and len(hits) == 10
    assert all(hit["training"] is False and hit["p_fit"] == "held-out" for hit in hits)
    assert all(hit["split"] == "test" for hit in hits)
    assert any("were fit on" in w and "left out" in w for w in default["warnings"])

    shown = _search_json(capsys, "--ranking", "logic", "--include-training")
    training = [hit for hit in shown["results"] if hit["training"]]
    assert training, "on noise features the in-sample probe would put training studies first"
    assert {hit["p_fit"] for hit in training} == {"out-of-fold"}
    assert all(hit["split"] == "train" for hit in training)

    similar = _search_json(capsys, "--ranking", "similarity", "--include-training")
    for hit in similar["results"]:  # similarity reads no labels, but the mark is still there
        assert hit["training"] == (hit["split"] == "train") and hit["p_fit"] is None


def test_cli_table_shows_the_training_column(built, capsys) -> None:
    args = ["search", "--index", "own", "--model", "random", "--text", QUERY, "--k", "10"]
    assert main([*args, "--ranking", "logic", "--include-training"]) == 0
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if line.lstrip().startswith("#"))
    assert "training" in header
    rows = [line for line in table.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 10 and any("yes, p out of fold" in row for row in rows)
    assert "training = yes: the index's finding probes were fit on" in table
    assert main([*args, "--ranking", "logic"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert rows and not any("yes, p" in row for row in rows)


def test_cross_fitted_p_of_training_studies_is_not_the_in_sample_p(built) -> None:
    """The p a training study gets is its out-of-fold p, not the full probe's: on noise the
    full probe separates its own training labels almost perfectly, the cross-fitted one not."""
    from sklearn.metrics import roc_auc_score

    from medheb_app.ranking.index_logic import _index_state
    from medheb_app.ranking.logic_aware import LogicAwareRanker

    embedder = registry.load_embedder("random", built)
    loaded = load_index("own", embedder, built)
    vocabulary = query_vocabulary(loaded)
    state = _index_state(loaded, embedder, built, vocabulary)
    rows = np.flatnonzero(state.training)
    assert len(rows) == N_STUDIES - N_TEST and state.out_of_fold[rows].all()
    ranker = LogicAwareRanker(embedder, state.probe, vocabulary=vocabulary)
    in_sample = ranker.finding_logits(state.vectors, state.vectors)
    column = state.probe.findings.index("Pleural Effusion")
    truth = [loaded.items[loaded.index.ids[r]]["findings"]["Pleural Effusion"] == 1 for r in rows]
    assert roc_auc_score(truth, in_sample[rows, column]) > 0.95  # memorised
    assert roc_auc_score(truth, state.logits[rows, column]) < 0.8  # out of fold: near chance
    held = np.flatnonzero(~state.training)  # held-out studies keep the full probe's logits
    assert np.allclose(state.logits[held, column], in_sample[held, column])

    shown = search(query_text=QUERY, model_spec="random", index="own", k=N_STUDIES,
                   settings=built, ranking="logic", include_training=True)  # fmt: skip
    by_id = {hit.id: hit for hit in shown.results}
    row_of = {item_id: row for row, item_id in enumerate(loaded.index.ids)}
    from medheb_app.query.parser import parse_query
    from medheb_app.ranking.logic_aware import logic_scores

    parsed = parse_query(QUERY, vocabulary)
    similarity = state.vectors @ embedder.encode([QUERY])[0]
    old = logic_scores(parsed, in_sample, state.probe.findings, similarity)
    differing = [
        abs(by_id[loaded.index.ids[r]].score - old[r]) > 1e-3 for r in rows
    ]  # the answer's p is the out-of-fold one for (nearly) every training study
    assert sum(differing) >= 0.9 * len(rows)
    for item_id, hit in by_id.items():
        if not hit.training:
            assert hit.score == pytest.approx(float(old[row_of[item_id]]), abs=1e-4)


def test_unprepared_out_of_fold_scores_say_in_sample(built) -> None:
    """A caller that may not fit (a web request) on an index whose out-of-fold scores are not
    on disk gets the full probe's p for training studies, marked in-sample."""
    import medheb_app.ranking.index_logic as index_logic

    embedder = registry.load_embedder("random", built)
    loaded = load_index("own", embedder, built)
    folder = built.data_dir / "probes" / "out-of-fold"
    saved = {path: path.read_bytes() for path in folder.glob("*.npz")}
    assert saved
    try:
        for path in saved:
            path.unlink()
        index_logic._LOADED.clear()
        from medheb_app.query.parser import parse_query

        parsed = parse_query(QUERY, query_vocabulary(loaded))
        vector = embedder.encode([QUERY])[0]
        found = index_logic.logic_search(
            loaded, embedder, parsed, vector, 20, built, fit=False, include_training=True
        )
        marks = set(found.p_fit)
        assert "in-sample" in marks and "out-of-fold" not in marks
        assert not any(folder.glob("*.npz"))  # fit=False wrote nothing
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
        index_logic._LOADED.clear()


def test_a_public_request_cannot_ask_for_training_studies(built) -> None:
    with pytest.raises(SearchError) as refused:
        search(query_text=QUERY, index="own", model_spec="random", settings=built,
               public=True, include_training=True)  # fmt: skip
    assert refused.value.field in ("include_training", "index")


def test_a_finding_the_index_has_no_labels_for_is_refused_with_exit_2(built, capsys) -> None:
    args = ["search", "--index", "own", "--model", "random", "--text", "emphysema and no effusion"]
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "this index does not search by emphysema" in err[0].lower()
    assert "Traceback" not in captured.err and captured.out == ""
    assert main([*args, "--ranking", "logic"]) == 2
    capsys.readouterr()
    with pytest.raises(SearchError, match="does not search by Emphysema") as refused:
        search(query_text="emphysema and no effusion", model_spec="random", index="own",
               settings=built)  # fmt: skip
    assert refused.value.field == "query"
    # similarity, asked for by name, still answers, without claiming to have checked the query
    answered = _search_json(capsys, "--ranking", "similarity", text="emphysema and no effusion")
    assert answered["ranking"] == "similarity" and len(answered["results"]) == 10
    assert all(hit["satisfies"] is None for hit in answered["results"])
    assert any("does not search by Emphysema" in warning for warning in answered["warnings"])


def test_an_unlabelled_index_offers_similarity_only(built, capsys) -> None:
    base = ["search", "--index", "plain", "--model", "random", "--k", "5"]
    assert main([*base, "--text", "pleural effusion", "--ranking", "logic"]) == 2
    err = capsys.readouterr().err
    assert "offers similarity search only" in err and "Traceback" not in err
    assert main([*base, "--text", "effusion and no cardiomegaly"]) == 2  # auto: an exclusion
    assert "offers similarity search only" in capsys.readouterr().err
    assert main([*base, "--text", "pleural effusion", "--json"]) == 0  # auto: a description
    plain = json.loads(capsys.readouterr().out)
    assert plain["ranking"] == "similarity" and len(plain["results"]) == 5
    assert any("offers similarity search only" in warning for warning in plain["warnings"])
    assert all(hit["satisfies"] is None and not hit["training"] for hit in plain["results"])
    assert main([*base, "--text", "effusion and no cardiomegaly", "--ranking", "similarity"]) == 0
    capsys.readouterr()
