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
