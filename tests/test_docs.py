"""The docs name every event type the API accepts."""

from pathlib import Path

from runs.domain.cloudevents import SCHEMAS

ROOT = Path(__file__).resolve().parents[1]


def test_every_event_type_and_field_is_documented():
    text = (ROOT / "docs" / "EVENTS.md").read_text()
    for type_, fields in SCHEMAS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{type_}` |")), None)
        assert row is not None, f"{type_} is missing from docs/EVENTS.md"
        for name in fields:
            assert f"`{name}`" in row, f"{type_}.{name} is missing from docs/EVENTS.md"


def _tracked_text_files():
    import subprocess

    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        path = ROOT / name
        if path.suffix in (".py", ".md", ".html", ".txt", ".toml", ".sh", ".cfg") or path.name in ("Makefile", "run"):
            yield name, path.read_text(errors="replace")


def test_nothing_points_outside_the_repository():
    """The domain reference is docs/DOMAIN.md: no file cites a copy a newcomer does not have."""
    outside = [name for name, text in _tracked_text_files() if "../" + "shared" in text]
    assert outside == []


def test_every_path_architecture_md_names_exists():
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:fleetops|runs|incidents|tests|templates|static|docs)/[\w/.-]*)`", text))
    named |= set(re.findall(r"(?<![\w/])((?:fleetops|runs|incidents)/[\w/]+\.py)\b", text))  # not tests/runs/...
    assert named, "ARCHITECTURE.md names no path"
    missing = sorted(path for path in named if not (ROOT / path.split(":")[0]).exists())
    assert missing == []


def test_a_newcomer_finds_each_concern_in_two_hops():
    """README -> docs/ARCHITECTURE.md's "Where to find" -> the file."""
    readme = (ROOT / "README.md").read_text()
    assert "(docs/ARCHITECTURE.md)" in readme and "(docs/DOMAIN.md)" in readme
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = text[text.index("## Where to find") : text.index("## The tree")]
    for question in (
        "where an event type is parsed",
        "where an event is applied",
        "where goodput is computed",
        "where the Slurm drain runs",
        "where the weekly PDF is built",
        "where a new detector goes",
    ):
        assert f"| {question}" in table, question
