"""Errors that the `llmfleet` command turns into one clear message and an exit status."""


class LlmfleetError(Exception):
    """A user-facing error: its text says what is wrong and how to fix it."""

    exit_code = 2


class LabError(LlmfleetError):
    """The local lab could not do what was asked."""
