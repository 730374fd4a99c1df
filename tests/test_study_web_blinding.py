"""Issue 18 item 8, attacked over raw HTTP: a run is blinded while an open study's items come
from it, whatever path the study stored. The shipped demo created its study from loaded
outputs (no source path), so its run was browsable signed out; a second run of the same models
and tasks in another folder was browsable too. Here an anonymous client calls the explorer's
handlers by fn_index for both runs while (1) a study made the demo's way and (2) a study made
from the copied folder is open, and gets no ranked list of either; the admin does get them (so
the test can fail), and once the studies close the lists are public again.
"""

from __future__ import annotations

import json
import shutil

import pytest

from medheb_app.services import create_services
from medheb_app.store.runs import finish_run, start_run
from medheb_app.study import close_study, create_study, load_run
from medheb_app.ui.server import build_server
from tests.run_fixtures import text_bench_run
from tests.web_client import QueueClient, fn_index, serve

PASSWORD = "blind-admin-pass-9"
MODELS = ["random", "oracle"]
TASK = "tt-blind"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.settings import Settings
    from medheb_app.tasks.base import Item

    root = tmp_path_factory.mktemp("blind")
    settings = Settings.from_env(data_dir=root / "data", admin_password=PASSWORD)
    services = create_services(settings, start_bootstrap=False)
    pairs = [(Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(8)]
    first = text_bench_run(TASK, pairs, root / "bench", settings)
    copy = root / "elsewhere" / "rerun"  # the same run's files in another folder
    shutil.copytree(first.out_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["out_dir"] = str(copy)
    (copy / "summary.json").write_text(json.dumps(summary))
    second = start_run(services.store, summary["suite"], MODELS, str(copy), {})
    finish_run(services.store, second, "finished")
    app = build_server(services)
    with serve(app) as base:
        yield {
            "base": base,
            "services": services,
            "runs": {"first": first.run_id, "copy": second},
            "paths": {"first": first.out_dir, "copy": str(copy)},
            "main": app.state.blocks["main"],
        }
    services.jobs.shutdown(wait=False)


def _admin(base: str) -> QueueClient:
    client = QueueClient(base)
    assert client.post_form("/auth/admin", {"password": PASSWORD}).status_code == 303
    return client


def _text(result: dict) -> str:
    return str(result["output"]) + result["text"]


def _lists_shown(site, client: QueueClient, run_id: int) -> bool:
    """Whether the explorer's drill-down handlers gave this client any model's ranked list or
    per-model hit marks for a query of the run."""
    load = fn_index(site["main"], "build_explorer_tab.<locals>._load")
    queries = fn_index(site["main"], "build_explorer_tab.<locals>._queries")
    ranked = fn_index(site["main"], "build_explorer_tab.<locals>._ranked")
    page_load = fn_index(site["main"], "build_app.<locals>.on_load")
    assert f"Run {run_id}:" in _text(client.call(page_load, []))  # fills the run picker
    assert "Error" not in _text(client.call(load, [run_id]))
    listed = _text(client.call(queries, [None, TASK, MODELS, True]))
    text = _text(client.call(ranked, [None, TASK, "q0", MODELS]))
    shown = "<h4>oracle" in text or "<h4>random" in text
    marks = "✓" in listed or "✗" in listed
    assert shown == marks, (listed[-300:], text[-300:])
    if not shown:
        assert "open reader study" in text
    return shown


def test_demo_way_and_copied_run_studies_blind_every_copy_of_the_run(site):
    store = site["services"].store
    anonymous, admin = QueueClient(site["base"]), _admin(site["base"])
    for run_id in site["runs"].values():  # no study yet: the runs are public
        assert _lists_shown(site, anonymous, run_id)

    # (1) the demo's way: outputs loaded first, so the study stores no path to match on
    outputs = load_run(site["paths"]["first"], MODELS)
    demo = create_study(
        store, "demo-way", MODELS, outputs, n_items=4, seed=0, reveal_after_vote=True
    ).id
    for run_id in site["runs"].values():
        assert not _lists_shown(site, anonymous, run_id), run_id
        assert _lists_shown(site, admin, run_id), run_id
    close_study(store, demo)

    # (2) a study drawn from the copy in another folder blinds the original run as well
    copied = create_study(
        store, "from-copy", MODELS, site["paths"]["copy"], n_items=4, reveal_after_vote=True
    ).id
    for run_id in site["runs"].values():
        assert not _lists_shown(site, anonymous, run_id), run_id
    close_study(store, copied)
    for run_id in site["runs"].values():  # closed: public again
        assert _lists_shown(site, anonymous, run_id), run_id


def test_a_rerun_whose_ties_broke_differently_is_still_blinded(tmp_path):
    """Content matching is by the top-3 as a set (2 of 3 shared ids), so a re-run with a
    reordered or slightly different top-3 is recognised too; an unrelated run is not."""
    from test_study_items import write_run

    from medheb_app.store.db import Store
    from medheb_app.study.blinding import run_is_blinded

    store = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    run = write_run(tmp_path / "run", models=("oracle", "random"), payloads=True)
    create_study(store, "open-one", ["oracle", "random"], run, 6, reveal_after_vote=True)
    rerun = tmp_path / "rerun"
    shutil.copytree(run, rerun)
    for path in rerun.glob("*/*.json"):
        data = json.loads(path.read_text())
        for query in data["queries"]:  # swap 1st and 2nd, replace the 3rd
            ranked = query["ranked"]
            ranked[0], ranked[1], ranked[2] = ranked[1], ranked[0], ranked[-1]
        path.write_text(json.dumps(data))
    assert run_is_blinded(store, run) and run_is_blinded(store, rerun)
    other = write_run(tmp_path / "other", models=("oracle",), tasks={"unrelated-t-t": 3})
    assert not run_is_blinded(store, other)
