"""The one way llmfleet renders a component's Jinja2 templates (``templates/<component>/``) in
Python: what verify compares a host with is exactly what the deploy wrote."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


@functools.cache
def environment(component: str, keep_trailing_newline: bool = True, **filters: Callable) -> Environment:
    """The environment of `component`'s templates, with its own `filters`: an undefined name is an
    error, block tags take their own line's newline and indentation away."""
    env = Environment(loader=FileSystemLoader(str(TEMPLATES / component)), undefined=StrictUndefined,
                      keep_trailing_newline=keep_trailing_newline, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(filters)
    return env


def render(component: str, name: str, **values) -> str:
    return environment(component).get_template(name).render(**values)


def path(component: str, name: str) -> str:
    """A template's file, for pyinfra's files.template."""
    return str(TEMPLATES / component / name)
