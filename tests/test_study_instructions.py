"""Issue 18 item 5: one instruction per task KIND, from the task's own metadata and relevance.

Pairing items (CT -> X-ray, MR T1 -> T2, prostate T2 -> DWI) said "Better = more of its scans
show the same finding as the query scan"; the right answer is the same patient's other scan.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from medheb_app.store.study_tables import StudyItem
from medheb_app.study.instructions import INSTRUCTIONS, instruction, is_pairing, relevance_kind
from tests.run_fixtures import medheb_lite_study

# one worker builds the session's medheb-lite run (tests/conftest.py) for the three modules
pytestmark = pytest.mark.xdist_group("medheb-lite-run")

# what each medheb-lite task's relevance defines (DESIGN: the registered suite)
EXPECTED = {
    "phantom-mr-t1-t2": "pairing-scan",
    "phantom-ct-xray": "pairing-scan",
    "prostate-t2-dwi": "pairing-scan",
    "phantom-cxr-i2i": "finding",
    "nih-i2i": "finding",
    "phantom-cxr-t2i": "finding-text",
    "nih-t2i": "finding-text",
    "phantom-cxr-i2label": "label",
    "nih-i2label": "label",
    "phantom-cxr-i2report": "report",
    "phantom-cxr-vqa": "answer",
    "phantom-cxr-vg": "region",
    "pubmedqa-q2context": "pairing-text",
    "iu-findings2impression": "pairing-text",
    "phantom-cxr-graded-severity": "graded",
    "phantom-cxr-graded-laterality": "graded",
}


def test_pairing_is_one_distinct_relevant_candidate_per_query():
    assert is_pairing([{"t1"}, {"t2"}, {"t3"}])
    assert not is_pairing([{"t1"}, {"t1"}])  # shared: the same finding, not a pair
    assert not is_pairing([{"a", "b"}, {"c"}])
    assert not is_pairing([])
    mb = {"family": "MB-VR", "form": "3d"}
    assert relevance_kind(mb, [{"x1"}, {"x2"}]) == "pairing-scan"
    assert relevance_kind(mb, [{"x1", "x2"}, {"x1", "x3"}]) == "finding"
    assert "same patient's other scan" in instruction(mb, [{"x1"}, {"x2"}])
    graded = {"family": "I-I", "graded": True, "relation": "laterality"}
    assert "laterality" in instruction(graded, [{"a", "b"}])


@pytest.mark.slow
def test_every_medheb_lite_task_gets_the_instruction_its_relevance_defines(
    tmp_path, settings, medheb_lite_run
):
    from medheb_app.study import next_item, record_vote, sign_in_open

    tasks, store, created = medheb_lite_study(
        medheb_lite_run, settings, tmp_path, items_per_task=1, open_enrolment=True
    )
    built = {task.name for task in tasks}
    assert built <= set(EXPECTED), built - set(EXPECTED)
    with store.session() as session:
        rows = session.execute(
            select(StudyItem.task, StudyItem.instruction).where(StudyItem.study_id == created.id)
        ).all()
    by_task = dict(rows)
    assert set(by_task) == built  # every task has an item
    for task, line in by_task.items():
        expected = INSTRUCTIONS[EXPECTED[task]].format(relation=task.rsplit("-", 1)[-1])
        assert line == expected, (task, line)
    for task in ("phantom-mr-t1-t2", "phantom-ct-xray"):
        assert "same finding" not in by_task[task]
    # and the rater is shown each item's own line
    rater = sign_in_open(store, created.id, "reader")
    shown = set()
    while (view := next_item(store, created.id, rater.rater_id)) is not None:
        shown.add(view.instruction)
        record_vote(store, view.token, rater.rater_id, "tie")
    assert shown == set(by_task.values())
