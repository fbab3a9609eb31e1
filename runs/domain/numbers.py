"""How a figure is written for people: one format for every page, report, e-mail, postmortem and chart label.

Pure: no Django import. The CSV and the API keep full precision; this is for reading only.
"""


def number_text(value: float | int | str | None, decimals: int = 0) -> str:
    """`value` with thousands separators and up to `decimals` decimals where they say something.

    Trailing zeros go (2.0 -> '2', 14.70 -> '14.7'), and from 1,000 up so do the decimals (45696.04 -> '45,696': a
    tenth beside four digits is noise). None or '' -> '—'; a text that is not a number comes back as it is.
    """
    if value is None or value == "":
        return "—"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    places = 0 if abs(value) >= 999.5 else int(decimals)
    text = f"{value:,.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
