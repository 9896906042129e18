"""The package-level import-cycle check of `make lint` (tests/import_cycles.py --packages): each
subpackage is one node, each core module one of its own; a cycle between them fails with the import
statements that make it, though no two modules import each other."""

import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "import_cycles.py"
check = runpy.run_path(str(CHECK))


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """cyclepkg in tmp_path: files by path below it ("probe/config.py"), each folder a package."""
    for name, text in {"__init__.py": "", **files}.items():
        path = tmp_path / "cyclepkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(tmp_path).parents:
            if folder != Path(".") and not (tmp_path / folder / "__init__.py").exists():
                (tmp_path / folder / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(text))
    return tmp_path


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), *args], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)})


# the core module schema imports the feature package probe, which imports the core: no module
# imports one that imports it back (schema -> probe.config, probe.run -> schema)
CORE_AND_FEATURE = {
    "schema.py": "from cyclepkg.probe.config import RequestClass\n",
    "probe/config.py": "RequestClass = object\n",
    "probe/run.py": """
        def run():
            from cyclepkg.schema import RequestClass  # a function-level import counts too
            return RequestClass
    """,
}


def test_a_cycle_between_a_core_module_and_a_subpackage_fails_with_its_import_lines(tmp_path):
    _package(tmp_path, CORE_AND_FEATURE)
    result = _run(tmp_path, "--packages", "cyclepkg")
    assert result.returncode == 1, result.stdout
    assert "package import cycle in cyclepkg: cyclepkg.probe -> cyclepkg.schema -> cyclepkg.probe" in result.stderr
    assert "cyclepkg/schema.py:1: from cyclepkg.probe.config import RequestClass" in result.stderr
    assert "cyclepkg/probe/run.py:3: from cyclepkg.schema import RequestClass" in result.stderr
    # module by module there is no cycle: only the package-level check sees it
    assert _run(tmp_path, "cyclepkg").returncode == 0


def test_the_cycle_is_found_by_package_cycles(tmp_path, monkeypatch):
    _package(tmp_path, CORE_AND_FEATURE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check["package_cycles"]("cyclepkg") == [["cyclepkg.probe", "cyclepkg.schema", "cyclepkg.probe"]]
    assert check["import_cycles"]("cyclepkg") == []


def test_a_subpackage_importing_the_core_and_itself_passes(tmp_path):
    _package(tmp_path, {
        "schema.py": "X = 1\n",
        "settings.py": "from cyclepkg.schema import X\n",
        "probe/config.py": "from cyclepkg.schema import X\n",
        "probe/run.py": "from cyclepkg.probe.config import X\nfrom cyclepkg import settings\n",
        "probe/sub/deep.py": "from cyclepkg.probe import run\n",
    })
    result = _run(tmp_path, "--packages", "cyclepkg")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cyclepkg: no import cycles between packages"


def test_llmfleet_has_no_import_cycle_between_packages():
    assert check["package_cycles"]("llmfleet") == []
