"""Write ``tests/durations.json``, the seconds each test file took, from a run's JUnit XML report.

    ./run test --junitxml=/tmp/junit.xml
    python tools/test_durations.py /tmp/junit.xml

The repository's ``conftest.py`` orders the test files longest first, so that ``./run test``'s two
workers (``--dist loadfile`` hands out whole files in that order) finish at about the same time.
Re-run this when a file's time changes a lot; a file missing from the table counts as the median.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "durations.json"


def file_of(case: ET.Element) -> str:
    """The test file of a JUnit test case (``file`` when pytest wrote it, else from the class name)."""
    if case.get("file"):
        return case.get("file", "")
    classname = case.get("classname", "")
    if ".ipynb" in classname:  # nbval: "chapters.C1_torch_compile.ipynb"
        stem = classname.removesuffix(".ipynb")
        folder, _, name = stem.partition(".")
        return f"{folder}/{name}.ipynb"
    parts = classname.split(".")
    for k in range(len(parts), 0, -1):
        candidate = "/".join(parts[:k]) + ".py"
        if (ROOT / candidate).exists():
            return candidate
    return classname


def durations(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        seconds[file_of(case)] += float(case.get("time", 0) or 0)
    return {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = durations(Path(argv[0]))
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE.relative_to(ROOT)}: {len(table)} files, {sum(table.values()) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
