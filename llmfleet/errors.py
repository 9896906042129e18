"""Errors that the `llmfleet` command turns into one clear message and an exit status."""


class LlmfleetError(Exception):
    """A user-facing error: its text says what is wrong and how to fix it."""

    exit_code = 2


class LabError(LlmfleetError):
    """The local lab could not do what was asked."""


class InventoryError(LlmfleetError):
    """A pyinfra inventory could not be read, or a --limit matches none of its hosts."""


class AuditError(LlmfleetError):
    """The audit could not run (exit status 2)."""


class OnboardError(LlmfleetError):
    """Onboarding could not run, or a stage failed (exit status 2)."""
