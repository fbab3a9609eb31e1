"""The console's template filters (runs/templatetags/fleet_tags.py): numbers in one format, JSON shown as JSON."""

from runs.templatetags.fleet_tags import hours, json_fields, minutes, number


def test_figures_minutes_and_hours_share_the_one_number_format():
    assert number(45696.04, "1") == "45,696" and number(None) == "—"
    assert minutes(1.0) == "1 min" and minutes(14.66) == "14.7 min" and minutes(1500.2) == "1,500 min"
    assert hours(164_505_744) == "45,696 h" and hours(5400) == "1.5 h" and hours(None) == "—"


def test_json_fields_writes_each_value_as_json_and_strings_as_their_text():
    data = {"ok": True, "gone": None, "ranks": {"slow": [3, 5]}, "note": "it's hot", "t": 81.5}
    assert json_fields(data) == [
        ("ok", "true"),
        ("gone", "null"),
        ("ranks", '{"slow": [3, 5]}'),
        ("note", "it's hot"),
        ("t", "81.5"),
    ]
    assert json_fields([1, "two"]) == [("", '[1, "two"]')]  # data that is not an object: one row
