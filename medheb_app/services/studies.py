"""Reader studies as the admin tabs and `study ...` commands manage and analyse them
(`services.studies`): creation from a stored run or a run folder, invitations, closing, votes,
analysis, exclusions, exports and sizing, bound to the settings and the store; each method
delegates to medheb_app.study.

The small helpers a form needs (the `fraction` validator, `item_counts` text, the help lines,
`creation_note`, `sensitivity_results` and `sensitivity_gaps` of a summary and StudyError) are
re-exported, so a tab needs no import past the services.

The analysis side (study.analysis, export, mrmc, quality, sizing: pandas, plotly and scipy,
about 2.5 s) is imported on a method's first use (`_analysis`), so that `study list`, `study
invite` and the other store-only commands start as fast as they did before they called here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.study import (
    InvitationInfo,
    StudyCreated,
    StudyError,
    close_study,
    create_invitations,
    find_study,
    list_invitations,
    list_studies,
    revoke_invitation,
)
from medheb_app.study.identity import Invitation
from medheb_app.study.items import (
    GOLD_ACCURACY_HELP,
    GOLD_SHARE_HELP,
    create_study,
    fraction,
    item_counts,
)
from medheb_app.study.payloads import Renderer, describe_with_tasks

if TYPE_CHECKING:  # annotations only: pandas and the run Summary are imported where used
    import pandas as pd

    from medheb_app.eval.results import Summary
    from medheb_app.store.study_tables import PreferenceStudy
    from medheb_app.study.sizing import Plan

__all__ = [
    "GOLD_ACCURACY_HELP",
    "GOLD_SHARE_HELP",
    "PAYLOAD_KINDS",
    "Studies",
    "StudyError",
    "creation_note",
    "fraction",
    "item_counts",
    "sensitivity_gaps",
    "sensitivity_results",
]
EXPORT_KINDS = ("votes", "mrmc")
PAYLOAD_KINDS = ("auto", "tasks", "none")
CODE_SUITE = "custom"  # what eval/runner.run_suite records for tasks passed in as objects
# A CXR-Retrieve run file keeps each hit's image path (study/run_outputs.py): nothing to rebuild.
# tasks.cxr_retrieve.SUITE_NAME, not imported here: that module imports pandas (see below).
IMAGES_IN_RUN = "cxr-retrieve"


@cache
def _analysis() -> SimpleNamespace:
    """The study modules that need pandas, plotly or scipy, imported once on first use."""
    # deferred: pandas, plotly, scipy (about 2.5 s that the store-only commands do not need)
    from medheb_app.study import analysis, export, mrmc, quality, sizing

    return SimpleNamespace(
        analysis=analysis, export=export, mrmc=mrmc, quality=quality, sizing=sizing
    )


def _sizing() -> ModuleType:
    """study.sizing alone (scipy.stats, no pandas or plotly), for a new study's note and plans."""
    # deferred: scipy.stats
    from medheb_app.study import sizing

    return sizing


def creation_note(n_items: int, votes_per_item: int, raters: int | None = None) -> str:
    """What a new study of `n_items` can show (study.sizing.creation_note)."""
    return _sizing().creation_note(n_items, votes_per_item, raters)


def sensitivity_results(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The RRRC preference of each model pair under each sensitivity reading of a summary
    (study.analysis.sensitivity_results), for the analysis tab and `study analyse`."""
    return _analysis().analysis.sensitivity_results(summary)


def sensitivity_gaps(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The sensitivity readings a summary applies to but could not compute, with the reason
    (study.analysis.sensitivity_gaps), for the analysis tab and `study analyse`."""
    return _analysis().analysis.sensitivity_gaps(summary)


def describe_run_folder(settings: Settings, kind: str, run_dir: str | Path) -> Renderer:
    """What raters are shown for the items of a run folder (`study create --payloads`): its
    suite's tasks rebuilt and rendered ('tasks'), or only the run files' own payloads
    ('none'); 'auto' is tasks when the folder has a summary.json of a suite this checkout
    can rebuild. Media go to a fresh folder under DATA_DIR/study-media. StudyError (a
    ValueError) for a folder or suite that cannot give what `kind` asks."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    media_dir = settings.data_dir / "study-media" / stamp
    summary_path = Path(run_dir) / "summary.json"
    if kind == "none" or (kind == "auto" and not summary_path.is_file()):
        return Renderer(media_dir)
    if not summary_path.is_file():
        raise StudyError(f"{summary_path} not found; --payloads tasks needs a `bench run` folder.")
    # deferred: pandas (the suites' task builders)
    from medheb_app.tasks.medheb import get_suite

    summary = json.loads(summary_path.read_text())
    names = [task["name"] for task in summary.get("tasks", [])]
    if summary.get("suite") in (CODE_SUITE, IMAGES_IN_RUN) and kind == "auto":
        return Renderer(media_dir)  # tasks made in code, or images named by the run files
    if summary.get("suite") == IMAGES_IN_RUN:
        raise StudyError(
            "A CXR-Retrieve run's files name each hit's image, so there are no tasks to "
            "rebuild; --payloads auto (the default) or none shows those images."
        )
    try:
        suite = get_suite(summary["suite"])
    except KeyError as error:
        kept = (
            "--payloads none shows the payloads kept in its run files (images, thumbnails, "
            "texts, SYNTHETIC marks)"
        )
        if summary.get("suite") == CODE_SUITE:
            raise StudyError(
                f"This run's tasks were made in code (suite {CODE_SUITE!r}), so --payloads "
                f"tasks cannot rebuild them; --payloads auto (the default) or {kept}."
            ) from None
        raise StudyError(
            f"{error.args[0]}. This app cannot rebuild the run's tasks; {kept}."
        ) from None
    tasks, _skipped = suite.build(settings, only=names or None)
    return describe_with_tasks(tasks, media_dir)


class Studies:
    """Administration and analysis of blinded reader studies (admins only: callers check).
    A study is named by its id, or (the CLI) by its id or internal name as typed."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def list(self) -> list[dict[str, Any]]:
        """Every study with its internal name, models, counts and settings."""
        return list_studies(self.store)

    def find(self, study: int | str) -> PreferenceStudy:
        """The study row by id or name; StudyError listing the studies that exist."""
        return find_study(self.store, study)

    def create(self, name: str, models: list[str], run: Summary, **options: Any) -> StudyCreated:
        """A blinded study over a stored run's outputs, its items rendered for raters as the
        run's suite shows them (describe_for_run); `options` as study.items.create_study's."""
        # deferred: faiss, pandas (services.runs rebuilds the run's suite with its tasks)
        from medheb_app.services.runs import describe_for_run

        return create_study(
            self.store,
            name,
            models,
            run.out_dir,
            describe=describe_for_run(self.settings, run.suite),
            **options,
        )

    def create_from_folder(
        self, name: str, models: list[str], run_dir: str | Path, payloads: str, **options: Any
    ) -> StudyCreated:
        """A blinded study over a run folder's outputs (`study create --run`), its items
        rendered as `payloads` says (describe_run_folder); `options` as create_study's."""
        describe = describe_run_folder(self.settings, payloads, run_dir)
        return create_study(self.store, name, models, run_dir, describe=describe, **options)

    def invite(self, study_id: int, n: int, label: str = "") -> list[Invitation]:
        """New invitations (secret and code in clear only in this return value)."""
        return create_invitations(self.store, int(study_id), int(n), label)

    def invitations(self, study_id: int) -> list[InvitationInfo]:
        """A study's invitations, used or not, revoked or not."""
        return list_invitations(self.store, int(study_id))

    def revoke_invitation(self, invitation_id: int) -> InvitationInfo:
        """Revoke one invitation; its rater can no longer vote."""
        return revoke_invitation(self.store, int(invitation_id))

    def close(self, study: int | str, closed: bool = True) -> None:
        """Close a study to raters (no more items or votes), or reopen it."""
        close_study(self.store, study, closed=closed)

    def votes(self, study: int | str | None = None) -> pd.DataFrame:
        """One row per vote of the study, or of every study for None (StudyError, a
        ValueError, for an unknown study)."""
        return _analysis().export.votes_frame(self.store, study)

    def summarise(
        self, study: int | str | None, votes: pd.DataFrame, **options: Any
    ) -> dict[str, Any]:
        """study.analysis.summarise over `votes`, leaving out the raters an admin excluded
        from `study` (none for every study's votes, `study` None)."""
        heavy = _analysis()
        excluded = (
            []
            if study is None
            else heavy.quality.confirmed_exclusions(self.store, self.find(study).id)
        )
        return heavy.analysis.summarise(votes, excluded=excluded, **options)

    @staticmethod
    def compared(votes: pd.DataFrame, excluded_raters: list[Any]) -> pd.DataFrame:
        """The model-comparison votes (gold left out) without the excluded raters."""
        compared = _analysis().analysis.model_votes(votes)
        if excluded_raters:
            compared = compared[~compared["rater"].isin(excluded_raters)]
        return compared

    @staticmethod
    def stratum_figure(compared: pd.DataFrame) -> Any:
        """Outcomes by top-1 stratum (MedHEB Figure 7) as a plotly figure."""
        return _analysis().analysis.stratum_figure(compared)

    def export_csv(self, study_id: int, kind: str = "votes") -> bytes:
        """The votes, or the MRMC input (reader, case, modality, score), as CSV bytes."""
        if kind not in EXPORT_KINDS:
            raise ValueError(f"Unknown export {kind!r}.")
        heavy = _analysis()
        votes = heavy.export.votes_frame(self.store, int(study_id))
        frame = (
            heavy.mrmc.mrmc_input(heavy.analysis.model_votes(votes)) if kind == "mrmc" else votes
        )
        return heavy.export.csv_text(frame).encode("utf-8")

    def export_file(
        self,
        out: str | Path,
        study: int | str | None = None,
        kind: str = "votes",
        ties: str = "half",
    ) -> int:
        """Write the votes in force (of one study, or all), or their MRMC input with `ties`
        scored as asked, to the CSV file `out`; the number of rows written."""
        if kind not in EXPORT_KINDS:
            raise ValueError(f"Unknown export {kind!r}.")
        export = _analysis().export
        if kind == "mrmc":
            return export.export_mrmc(self.store, out, study, ties)
        return export.export_csv(self.store, out, study)

    def exclude_rater(
        self, study_id: int, rater_id: int, reason: str, decided_by: str, reinstate: bool
    ) -> None:
        """Log an admin's exclusion (or reinstatement) of a rater; no vote is deleted."""
        _analysis().quality.record_exclusion(
            self.store, int(study_id), int(rater_id), reason, decided_by, reinstate
        )

    def exclusion_log(self, study_id: int) -> list[dict[str, Any]]:
        """Every logged exclusion and reinstatement of the study's raters, oldest first."""
        return _analysis().quality.exclusion_log(self.store, int(study_id))

    def pilot_estimates(self, study: int | str) -> dict[str, Any]:
        """A pilot study's observed preference, raters and ICCs (study.sizing), for `plan`;
        ValueError when it has no votes yet."""
        heavy = _analysis()
        votes = heavy.analysis.model_votes(heavy.export.votes_frame(self.store, study))
        return heavy.sizing.pilot_estimates(votes)

    @staticmethod
    def planning_icc(icc: float) -> float:
        """A pilot's ICC as a plan can use it (study.sizing.planning_icc)."""
        return _sizing().planning_icc(icc)

    @staticmethod
    def plan(preference: float, raters: int, **design: Any) -> Plan:
        """How many items a study needs (study.sizing.plan; `design` as its keywords)."""
        return _sizing().plan(preference, raters, **design)
