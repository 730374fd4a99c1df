"""Everything a rater's session gets back, serialised: before an item's vote nothing in it names
a model, the task, the internal study name, or says that an item is a gold item."""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from run_fixtures import MODELS, TASK, write_run

from medheb_app.store.db import Store
from medheb_app.study import (
    StudyError,
    create_invitations,
    create_study,
    list_open_studies,
    next_item,
    progress,
    record_vote,
    resume,
    reveal,
    sign_in_with_invitation,
    undo_last_vote,
)
from medheb_app.study.payloads import Renderer

INTERNAL_NAME = "internal-study-name-secret"
SECRETS = [*MODELS, TASK, INTERNAL_NAME, "gold", "reference", "T-T", "only_a", "both_hit"]


def serialise(value: Any) -> str:
    if is_dataclass(value):
        value = asdict(value)
    return json.dumps(value, default=str)


def test_no_rater_facing_return_value_leaks_before_the_vote(store: Store, tmp_path: Path):
    write_run(tmp_path / "run", with_images=True)
    study = create_study(
        store, INTERNAL_NAME, list(MODELS), tmp_path / "run", 4, raters_per_item=1,
        describe=Renderer(tmp_path / "media"), gold_share=0.2, public_title="Reader study",
        reveal_after_vote=True,
    )  # fmt: skip
    assert study.n_gold == 1
    invitation = create_invitations(store, study.id, 1)[0]  # admin side: not checked

    seen: list[str] = []  # everything the rater got back, in order

    def rater_call(function, *args):
        try:
            result = function(*args)
        except StudyError as error:  # messages reach the rater too
            seen.append(str(error))
            return None
        seen.append(serialise(result))
        return result

    rater_call(list_open_studies, store)
    session = rater_call(sign_in_with_invitation, store, invitation.secret, "Dr Blind")
    rater_call(resume, store, session.resume_secret)
    rater_call(progress, store, study.id, session.rater_id)
    revealed: list[str] = []
    for round_number in range(10):
        view = rater_call(next_item, store, study.id, session.rater_id)
        if view is None:
            break
        rater_call(reveal, store, view.token, session.rater_id)  # refused: no vote yet
        # everything so far is from before this item's vote
        shown = "\n".join(seen).replace(str(tmp_path), "<media folder>")  # the test's own path
        for secret in SECRETS:
            assert secret.lower() not in shown.lower(), f"{secret!r} leaked before the vote"
        for payload in [view.query, *view.side_a, *view.side_b]:
            for key in ("image", "montage", "frames", "crop"):
                if key in payload:
                    assert Path(payload[key]).parent == tmp_path / "media"
        rater_call(record_vote, store, view.token, session.rater_id, "A")
        if round_number == 0:  # an undo re-opens the item: the next view is the same item
            rater_call(undo_last_vote, store, study.id, session.rater_id)
            continue
        revealed.append(serialise(reveal(store, view.token, session.rater_id)))
    assert progress(store, study.id, session.rater_id)["done"] == 5  # 4 compared + 1 gold
    assert any(MODELS[0] in names for names in revealed)  # names do come, after the vote
    # a gold item's reveal names study models like any item: it never says it was a check
    assert not any("reference" in names or "random" in names for names in revealed)
