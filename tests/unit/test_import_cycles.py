"""The import-cycle check of `make lint` (tests/import_cycles.py) fails on a cycle made of
function-level and TYPE_CHECKING imports, and passes on llmfleet."""

import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "import_cycles.py"
import_cycles = runpy.run_path(str(CHECK))["import_cycles"]


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def _run(tmp_path: Path, package: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), package], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)})


def test_a_cycle_through_type_checking_and_function_imports_fails_the_check(tmp_path):
    _package(tmp_path, {
        "schema": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from cyclepkg.checks import check
        """,
        "checks": """
            def check():
                from cyclepkg import schema
                return schema
        """,
    })
    result = _run(tmp_path, "cyclepkg")
    assert result.returncode == 1
    assert "import cycle in cyclepkg: cyclepkg.checks -> cyclepkg.schema -> cyclepkg.checks" in result.stderr


def test_imports_in_one_direction_pass_the_check(tmp_path):
    _package(tmp_path, {"schema": "X = 1\n", "checks": "from cyclepkg.schema import X\n"})
    result = _run(tmp_path, "cyclepkg")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cyclepkg: no import cycles"


def test_llmfleet_has_no_import_cycle():
    assert import_cycles("llmfleet") == []
