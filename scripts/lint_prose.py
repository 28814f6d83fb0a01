"""Docs lint (not a unit test): the project's text speaks of what a user needs, never of the machines or the
order of its own making. Scans README.md, docs/*.md, docs/runs/PROVENANCE.md and the .py/.md/.sh files of
src/, tests/, benchmarks/ and scripts/ for words that belong to the latter. Exit 1 naming each line found.

    python3 scripts/lint_prose.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANNED = re.compile(r"device machine|\bsessions?\b|this round|round's|\blent\b|issue #\d|device image|"
                    r"first commit", re.IGNORECASE)


def project_text() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "docs" / "runs" / "PROVENANCE.md", *sorted((ROOT / "docs").glob("*.md"))]
    for sub in ("src", "tests", "benchmarks", "scripts"):
        files += sorted(p for p in (ROOT / sub).rglob("*") if p.suffix in (".py", ".md", ".sh"))
    return [p for p in files if p.is_file() and p.resolve() != Path(__file__).resolve()]


def main() -> int:
    files = project_text()
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}" for p in files
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if BANNED.search(line)]
    for h in hits:
        print(h)
    print(f"lint_prose: {len(files)} files, {len(hits)} line(s) to reword" if hits else
          f"lint_prose: {len(files)} files read, nothing to reword")
    return 1 if hits or len(files) < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
