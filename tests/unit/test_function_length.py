"""No function of llmfleet/ or operations/ runs over MAX_LINES lines (its def line to the last line
of its body; decorators not counted): a longer one is split into named helpers."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("llmfleet", "operations")
MAX_LINES = 80


def long_functions(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES,
                   max_lines: int = MAX_LINES) -> list[str]:
    """'file:line name length' for each function (nested ones and methods too) over max_lines."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > max_lines:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} {length}")
    return sorted(found)


def test_no_function_is_over_80_lines():
    offenders = long_functions()
    assert not offenders, f"functions over {MAX_LINES} lines:\n" + "\n".join(offenders)


def test_a_long_function_is_named(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    (pkg / "mod.py").write_text(f"@staticmethod\ndef short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path, ("pkg",)) == ["pkg/mod.py:6 long 82"]
