"""Reader studies as the admin tabs and `study ...` commands manage and analyse them
(`services.studies`): creation from a stored run, invitations, votes, analysis, exclusions and
exports, bound to the settings and the store; each method delegates to medheb_app.study.

The small helpers a form needs (the `fraction` validator, `item_counts` text, the help lines,
`sensitivity_results` of a summary and StudyError) are re-exported, so a tab needs no import
past the services.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from medheb_app.eval.results import Summary
from medheb_app.services.runs import describe_for_run
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.study import (
    InvitationInfo,
    StudyCreated,
    StudyError,
    create_invitations,
    list_invitations,
    list_studies,
    revoke_invitation,
)
from medheb_app.study.analysis import model_votes, sensitivity_results, stratum_figure, summarise
from medheb_app.study.export import csv_text, votes_frame
from medheb_app.study.identity import Invitation
from medheb_app.study.items import (
    GOLD_ACCURACY_HELP,
    GOLD_SHARE_HELP,
    create_study,
    fraction,
    item_counts,
)
from medheb_app.study.mrmc import mrmc_input
from medheb_app.study.quality import confirmed_exclusions, record_exclusion
from medheb_app.study.sizing import creation_note

__all__ = [
    "GOLD_ACCURACY_HELP",
    "GOLD_SHARE_HELP",
    "Studies",
    "StudyError",
    "creation_note",
    "fraction",
    "item_counts",
    "sensitivity_results",
]
EXPORT_KINDS = ("votes", "mrmc")


class Studies:
    """Administration and analysis of blinded reader studies (admins only: callers check)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def list(self) -> list[dict[str, Any]]:
        """Every study with its internal name, models, counts and settings."""
        return list_studies(self.store)

    def create(self, name: str, models: list[str], run: Summary, **options: Any) -> StudyCreated:
        """A blinded study over a stored run's outputs, its items rendered for raters as the
        run's suite shows them (describe_for_run); `options` as study.items.create_study's."""
        return create_study(
            self.store,
            name,
            models,
            run.out_dir,
            describe=describe_for_run(self.settings, run.suite),
            **options,
        )

    def invite(self, study_id: int, n: int, label: str = "") -> list[Invitation]:
        """New invitations (secret and code in clear only in this return value)."""
        return create_invitations(self.store, int(study_id), int(n), label)

    def invitations(self, study_id: int) -> list[InvitationInfo]:
        """A study's invitations, used or not, revoked or not."""
        return list_invitations(self.store, int(study_id))

    def revoke_invitation(self, invitation_id: int) -> InvitationInfo:
        """Revoke one invitation; its rater can no longer vote."""
        return revoke_invitation(self.store, int(invitation_id))

    def votes(self, study_id: int) -> pd.DataFrame:
        """One row per vote of the study (ValueError for an unknown study)."""
        return votes_frame(self.store, int(study_id))

    def summarise(self, study_id: int, votes: pd.DataFrame, **options: Any) -> dict[str, Any]:
        """study.analysis.summarise over `votes`, leaving out the raters an admin excluded."""
        excluded = confirmed_exclusions(self.store, int(study_id))
        return summarise(votes, excluded=excluded, **options)

    @staticmethod
    def compared(votes: pd.DataFrame, excluded_raters: list[Any]) -> pd.DataFrame:
        """The model-comparison votes (gold left out) without the excluded raters."""
        compared = model_votes(votes)
        if excluded_raters:
            compared = compared[~compared["rater"].isin(excluded_raters)]
        return compared

    @staticmethod
    def stratum_figure(compared: pd.DataFrame) -> Any:
        """Outcomes by top-1 stratum (MedHEB Figure 7) as a plotly figure."""
        return stratum_figure(compared)

    def export_csv(self, study_id: int, kind: str = "votes") -> bytes:
        """The votes, or the MRMC input (reader, case, modality, score), as CSV bytes."""
        if kind not in EXPORT_KINDS:
            raise ValueError(f"Unknown export {kind!r}.")
        votes = votes_frame(self.store, int(study_id))
        frame = mrmc_input(model_votes(votes)) if kind == "mrmc" else votes
        return csv_text(frame).encode("utf-8")

    def exclude_rater(
        self, study_id: int, rater_id: int, reason: str, decided_by: str, reinstate: bool
    ) -> None:
        """Log an admin's exclusion (or reinstatement) of a rater; no vote is deleted."""
        record_exclusion(self.store, int(study_id), int(rater_id), reason, decided_by, reinstate)
