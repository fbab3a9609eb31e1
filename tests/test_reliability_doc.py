"""docs/RELIABILITY.md's table is made from the tests that prove it: every `@pytest.mark.reliability` test, one row.

The rows come from pytest's own collection (a subprocess run with this module as a plugin, which writes each
marked test's mark), so a row cannot name a test that does not exist, and a test that stops holding fails CI
rather than leaving the document wrong. `make reliability-doc` (python -m tests.test_reliability_doc --write)
rewrites the table after a marked test is added or changed.
"""

import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- reliability:begin -->", "<!-- reliability:end -->"
OUT = "FLEETOPS_RELIABILITY_OUT"


def pytest_collection_modifyitems(session, config, items):
    """Plugin side, in the collecting subprocess: each marked test as a row, JSON, to $FLEETOPS_RELIABILITY_OUT."""
    out = os.environ.get(OUT)
    if not out:
        return
    rows = []
    for item in items:
        mark = item.get_closest_marker("reliability")
        if mark is None:
            continue
        tried = mark.args[0] if mark.args else mark.kwargs.get("tried", "")
        test = item.nodeid.split("[")[0]  # one row for all parameters of a test
        rows.append(
            {"test": test, "tried": tried, "how": mark.kwargs.get("how", ""), "outcome": mark.kwargs.get("outcome", "")}
        )
    Path(out).write_text(json.dumps(rows))


@cache
def collect() -> list[dict]:
    """The marked tests, as pytest collects them (once per process)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.test_reliability_doc"]
            + ["-p", "no:cacheprovider", "tests"],
            cwd=ROOT,
            env={**os.environ, OUT: str(out)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0 and out.exists(), (
            f"collection failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        rows = json.loads(out.read_text())
    unique = {row["test"]: row for row in rows}
    return sorted(unique.values(), key=lambda row: (_area(row["test"]), row["test"]))


def _area(test: str) -> str:
    """The test's folder under tests/: faults, security, hostile, clusters, ..."""
    parts = test.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else "general"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(rows: list[dict]) -> str:
    lines = ["| area | tried | how | outcome (what the test asserts) | test |", "|---|---|---|---|---|"]
    for row in rows:
        cells = [_area(row["test"]), row["tried"], row["how"], row["outcome"], f"`{row['test']}`"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _table_in(doc: str) -> str:
    assert BEGIN in doc and END in doc, f"{DOC} lost its {BEGIN} / {END} markers"
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write() -> None:
    doc = DOC.read_text()
    head, tail = doc.split(BEGIN, 1)[0], doc.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{render(collect())}\n{END}{tail}")


def test_every_marked_test_says_what_it_tried_how_and_the_outcome():
    rows = collect()
    assert rows, "no test carries the reliability mark"
    incomplete = [row["test"] for row in rows if not (row["tried"] and row["how"] and row["outcome"])]
    assert not incomplete, f"reliability marks without tried, how= or outcome=: {incomplete}"


def test_docs_reliability_md_holds_exactly_the_table_of_the_marked_tests():
    expected = render(collect())
    assert _table_in(DOC.read_text()) == expected, (
        "docs/RELIABILITY.md is out of date with the reliability marks: run `make reliability-doc`"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_reliability_doc --write")
    write()
    print(f"wrote {DOC.relative_to(ROOT)}")
