"""docs/settings.md, the reference of every setting, rendered from llmfleet/schema.py (where each
setting is declared once: its type, its default, its documentation).

    python -m llmfleet.settings_reference > docs/settings.md     (make settings-doc)

tests/unit/test_settings.py fails while docs/settings.md differs from what this renders.
"""

from __future__ import annotations

import ast
import functools
import inspect
import pprint
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from llmfleet import schema
from llmfleet.schema import GPU_PROFILES_FILE, PACES_A_DEPLOY, SECTIONS, defaults

HEADER = """# Settings

Every llmfleet setting with its default, a section a component. Set them in group data: the whole
fleet in `group_data/all.py`, a group in `group_data/<group>.py`, one host in the inventory; a setting
left out takes the default below. A deploy stops before it touches any host when a value is not
valid, naming the host, the setting, the value and the fix.

Rendered from `llmfleet/schema.py`, where each setting is declared once (`make settings-doc`).
"""


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `int`, `list[str]`, `"a" | "b"`, `None` (constraints left out)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return type_name(get_args(annotation)[0])
    if origin is Literal:
        return " | ".join(repr(v).replace("'", '"') for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(annotation))
    if annotation is type(None):
        return "None"
    if origin is not None:
        args = get_args(annotation)
        name = getattr(origin, "__name__", str(origin))
        if origin is tuple and args:
            return f"tuple[{', '.join(type_name(a) for a in args)}]"
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(name: str, value: Any) -> str:
    if name == "gpu_profiles":
        return f"the profiles of `llmfleet/{GPU_PROFILES_FILE.name}`: " + ", ".join(f"`{p}`" for p in value)
    text = pprint.pformat(value, width=96, sort_dicts=False)
    return f"`{text}`" if "\n" not in text and len(text) <= 80 else f"\n\n```python\n{text}\n```"


def _doc(text: str) -> str:
    """A docstring as Markdown: its indented lines (lists, examples) kept as they are, in a block."""
    out: list[str] = []
    block: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        if line.startswith("  "):
            block.append(line)
            continue
        if block:
            out += ["", "```text", *block, "```", ""]
            block = []
        out.append(line)
    if block:
        out += ["", "```text", *block, "```"]
    return "\n".join(out).strip()


@functools.cache
def field_docs() -> dict[str, str]:
    """Every setting's documentation: the string literal below its field in llmfleet/schema.py."""
    tree = ast.parse(Path(schema.__file__).read_text())
    docs: dict[str, str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in {s.__name__ for s in SECTIONS}):
        for field, after in zip(cls.body, cls.body[1:], strict=False):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[field.target.id] = after.value.value
    return docs


def _field(name: str, field: FieldInfo, value: Any) -> list[str]:
    paces = ("; paces a deploy (not part of a host's state: its self-audit does not see it)"
             if PACES_A_DEPLOY in field.metadata else "")
    return [f"### `{name}`", "", f"Type `{type_name(field.annotation)}`; default {_default(name, value)}{paces}", "",
            _doc(field_docs().get(name, "")), ""]


def _own_fields(section: type[BaseModel]) -> list[str]:
    """The settings a section declares itself, in their order."""
    return [n for n in vars(section).get("__annotations__", {}) if n in section.model_fields]


def markdown() -> str:
    values = defaults()
    lines = [HEADER, "## Contents", ""]
    for section in SECTIONS:
        title = _title(section)
        lines.append(f"- [{title}](#{title}): " + ", ".join(f"`{n}`" for n in _own_fields(section)))
    lines.append("")
    for section in SECTIONS:
        lines += [f"## {_title(section)}", "", _doc(section.__doc__ or ""), ""]
        for name in _own_fields(section):
            lines += _field(name, section.model_fields[name], values[name])
    return "\n".join(lines).rstrip() + "\n"


def _title(section: type[BaseModel]) -> str:
    """The component's name, from the section's: GpuProfilesSettings -> gpu_profiles."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", section.__name__.removesuffix("Settings")).lower()


def main() -> None:
    print(markdown(), end="")


if __name__ == "__main__":
    main()
