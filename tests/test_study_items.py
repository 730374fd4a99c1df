"""Study items from benchmark run outputs: loading, stratified sampling, pairs, top-1 hits."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from medheb_app.eval.results import TaskRun, model_dirname
from medheb_app.study.errors import StudyError
from medheb_app.study.items import build_items, stratified_sample
from medheb_app.study.run_outputs import common_queries, gold_ids, load_run


def ranked_for(model: str, positive: str, candidates: list[str], rng: random.Random) -> list[str]:
    """'oracle' puts the positive first, 'open_clip:bad/model' last, 'random' anywhere."""
    others = [c for c in candidates if c != positive]
    if model == "oracle":
        return [positive, *others]
    if model == "random":
        shuffled = candidates[:]
        rng.shuffle(shuffled)
        return shuffled
    return [*others, positive]


def write_run(
    out: Path,
    models: tuple[str, ...] = ("oracle", "random"),
    tasks: dict[str, int] | None = None,
    n_candidates: int = 12,
    seed: int = 0,
    payloads: bool = False,
) -> Path:
    """A benchmark run directory written by the runner's own TaskRun.to_disk (the real format);
    with `payloads`, display texts are added the way a study-ready run carries them."""
    tasks = tasks or {"nih-i-lab": 6, "phantom-i-rep": 4, "pubmedqa-t-t": 2}
    rng = random.Random(seed)
    for model in models:
        for task, n_queries in tasks.items():
            candidates = [f"{task}:cand{i}" for i in range(n_candidates)]
            queries = []
            for q in range(n_queries):
                positive = candidates[(q * 5) % n_candidates]
                ranked = ranked_for(model, positive, candidates, rng)
                queries.append(
                    {
                        "id": f"{task}:q{q}",
                        "ranked": ranked,
                        "scores": [1.0 - 0.01 * i for i in range(len(ranked))],
                        "positives": [positive],
                        "hit@1": float(ranked[0] == positive),
                    }
                )
            TaskRun(
                task={"name": task, "family": task.split("-", 1)[1].upper(), "split": "ID"},
                model=model,
                model_card={"name": model},
                scores={"hit@1": 0.0},
                queries=queries,
                instruction="",
                n_candidates=n_candidates,
            ).to_disk(out)
            if payloads:
                add_payloads(out / model_dirname(model) / f"{task}.json")
    return out


def add_payloads(path: Path) -> None:
    data = json.loads(path.read_text())
    for n, query in enumerate(data["queries"]):
        query["query"] = {"text": f"Which study shows finding number {n}?"}
    ids = {c for query in data["queries"] for c in query["ranked"]}
    data["candidates"] = {c: {"text": f"Report {sorted(ids).index(c)}."} for c in ids}
    path.write_text(json.dumps(data))


def test_load_run_reads_runner_files_including_path_unsafe_specs(tmp_path: Path):
    spec = "open_clip:bad/model"
    run = write_run(tmp_path / "run", models=("oracle", spec))
    assert (run / model_dirname(spec)).is_dir()
    outputs = load_run(run, ["oracle", spec])
    task = outputs[spec]["nih-i-lab"]
    assert task.family == "I-LAB" and task.split == "ID"
    assert len(task.queries) == 6
    query = task.queries["nih-i-lab:q1"]
    assert query.gold == frozenset({"nih-i-lab:cand5"})
    assert query.ranked[-1] == "nih-i-lab:cand5"
    assert query.payload == {"ref": "nih-i-lab:q1"}


def test_load_run_errors_name_the_problem(tmp_path: Path):
    run = write_run(tmp_path / "run")
    with pytest.raises(
        StudyError, match=r"No outputs for model 'medemb'.*available: oracle, random"
    ):
        load_run(run, ["oracle", "medemb"])
    with pytest.raises(StudyError, match="not found"):
        load_run(tmp_path / "missing", ["oracle", "random"])
    (run / "oracle" / "broken.json").write_text("{not json")
    with pytest.raises(StudyError, match=r"broken\.json is not valid JSON"):
        load_run(run, ["oracle"])


def test_gold_of_graded_queries_is_the_best_gain():
    assert gold_ids({"gains": {"x": 1.0, "y": 2.0, "z": 2.0}}) == frozenset({"y", "z"})
    assert gold_ids({"gains": {}}) == frozenset()
    assert gold_ids({"positives": ["p"], "gains": {"x": 3}}) == frozenset({"p"})


def test_stratified_sample_spreads_evenly_and_redistributes_small_tasks():
    ids = {"big": [f"b{i}" for i in range(50)], "mid": [f"m{i}" for i in range(8)], "tiny": ["t0"]}
    picked = stratified_sample(ids, 21, random.Random(0))
    counts = Counter(task for task, _ in picked)
    # 7 each, but "tiny" has 1 and "mid" 8: what they cannot give goes to "big"
    assert counts == {"big": 12, "mid": 8, "tiny": 1}
    assert len(set(picked)) == 21
    # more tasks than queries: one query from each of n distinct tasks
    many = {f"task{i}": ["q"] for i in range(10)}
    assert len({t for t, _ in stratified_sample(many, 4, random.Random(1))}) == 4
    with pytest.raises(StudyError, match="only 59"):
        stratified_sample(ids, 60, random.Random(0))


def test_build_items_pairs_models_and_records_top1_hits(tmp_path: Path):
    run = write_run(tmp_path / "run", models=("oracle", "random", "worst"), payloads=True)
    outputs = load_run(run, ["oracle", "random", "worst"])
    assert common_queries(outputs) == {
        t: sorted(outputs["oracle"][t].queries)
        for t in ("nih-i-lab", "phantom-i-rep", "pubmedqa-t-t")
    }
    items = build_items(outputs, n_queries=6, seed=3).items
    assert len(items) == 6 * 3  # three pairs per query
    assert Counter(item.task for item in items) == {
        "nih-i-lab": 6,
        "phantom-i-rep": 6,
        "pubmedqa-t-t": 6,
    }
    pairs = Counter((item.model_a, item.model_b) for item in items)
    assert pairs == {("oracle", "random"): 6, ("oracle", "worst"): 6, ("random", "worst"): 6}
    for item in items:
        assert len(item.top_a) == len(item.top_b) == 3
        gold = item.gold[0]
        if item.model_a == "oracle":
            assert item.hit_a and item.top_a[0]["id"] == gold
        if item.model_b == "worst":
            assert not item.hit_b and gold not in [e["id"] for e in item.top_b]
        expected_hit_b = item.top_b[0]["id"] in item.gold
        assert item.hit_b == expected_hit_b
    assert items == build_items(outputs, n_queries=6, seed=3).items  # reproducible from seed


def test_payloads_from_run_files(tmp_path: Path):
    run = write_run(tmp_path / "run", tasks={"t-t": 2})
    for model in ("oracle", "random"):
        path = run / model / "t-t.json"
        data = json.loads(path.read_text())
        data["queries"][0]["query"] = "Is aspirin effective?"
        data["queries"][1]["text"] = "Is rest effective?"
        data["candidates"] = {f"t-t:cand{i}": {"text": f"abstract {i}"} for i in range(12)}
        path.write_text(json.dumps(data))
    outputs = load_run(run, ["oracle", "random"])
    built = build_items(outputs, n_queries=2, seed=0)
    assert built.withheld == []
    by_query = {item.query_id: item for item in built.items}
    assert by_query["t-t:q0"].query_payload == {"form": "text", "text": "Is aspirin effective?"}
    assert by_query["t-t:q1"].query_payload == {"form": "text", "text": "Is rest effective?"}
    assert by_query["t-t:q0"].top_a[0] == {
        "id": "t-t:cand0",
        "payload": {"form": "text", "text": "abstract 0"},
    }


def test_build_items_needs_two_distinct_models(tmp_path: Path):
    outputs = load_run(write_run(tmp_path / "run"), ["oracle"])
    with pytest.raises(StudyError, match="at least two"):
        build_items(outputs, n_queries=2, seed=0)
