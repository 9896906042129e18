"""The repository stands alone for a user who clones it: no file points outside it."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = "../" + "shared"  # a folder beside the repository, which a clone does not have


def test_no_file_of_the_repository_refers_to_a_folder_outside_it():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE in line]
    assert not found, f"references to {OUTSIDE}: {found}"
