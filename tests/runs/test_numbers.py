"""One number format for people (runs/domain/numbers.py): thousands separators, decimals only where they say
something. Issue 20: "numbers appear as 45696.0 beside 129,034"."""

import pytest

from runs.domain.numbers import number_text


@pytest.mark.parametrize(
    ("value", "decimals", "text"),
    [
        (129034, 0, "129,034"),
        (45696.04, 1, "45,696"),
        (1174.4, 0, "1,174"),
        (1234.56, 2, "1,235"),  # from 1,000 up, no decimals: a tenth beside four digits is noise
        (999.96, 1, "1,000"),
        (960.0, 1, "960"),  # trailing zeros go
        (14.66, 1, "14.7"),
        (0.25, 2, "0.25"),
        (0.00012, 4, "0.0001"),
        (-0.04, 1, "0"),  # never "-0"
        (-2.5, 1, "-2.5"),
        ("3.5", 1, "3.5"),  # a number in a string, as some JSON gives it
        (None, 1, "—"),
        ("", 1, "—"),
        ("n/a", 1, "n/a"),  # not a number: as it is
    ],
)
def test_it_writes_thousands_separators_and_decimals_only_where_they_say_something(value, decimals, text):
    assert number_text(value, decimals) == text
