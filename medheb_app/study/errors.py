"""Errors of the preference study; every message is meant for the person who caused it."""


class StudyError(ValueError):
    """A problem with a study request (bad input, unknown study, a locked item)."""


class ItemGoneError(StudyError):
    """The item a vote was meant for is no longer in the study."""
