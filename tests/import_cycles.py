"""`make lint`: fail on an import cycle inside a package (default llmfleet), counting every import
statement: at module level, inside functions and under `if TYPE_CHECKING:` (grimp, the graph
library of import-linter, reads them all).

    python tests/import_cycles.py [PACKAGE]
"""

from __future__ import annotations

import sys

import grimp


def import_cycles(package: str) -> list[list[str]]:
    """Each cycle once, as the chain of modules that import each other (the first one again last)."""
    graph = grimp.build_graph(package, cache_dir=None)
    cycles, seen = [], set()
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                cycles.append([importer, *back])
    return cycles


def main(argv: list[str]) -> int:
    package = argv[1] if len(argv) > 1 else "llmfleet"
    cycles = import_cycles(package)
    for cycle in cycles:
        print(f"import cycle in {package}: {' -> '.join(cycle)}", file=sys.stderr)
    if not cycles:
        print(f"{package}: no import cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
