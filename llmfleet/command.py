"""What every `llmfleet` command shares: the group that turns an LlmfleetError into one message and
its exit status, and the consoles (stdout for results, stderr for messages)."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from llmfleet.errors import LlmfleetError

console = Console()
err = Console(stderr=True)


class Group(click.Group):
    """Turn LlmfleetError into one message and its exit status instead of a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LlmfleetError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
            sys.exit(exc.exit_code)
