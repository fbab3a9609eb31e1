"""Pages of a long list for the console (the incident board, the overview's runs): ?page=N, with links either side
that keep the other query parameters, as plain links that htmx also follows."""

from dataclasses import dataclass
from math import ceil

from django.http import HttpRequest
from django.urls import reverse


@dataclass(frozen=True)
class Page:
    number: int  # 1-based; a number past the end (the list shrank while it was open) is the last page
    first: int  # offset of the page's first row
    size: int


def page_get(request: HttpRequest, *, total: int, size: int) -> Page | None:
    """The page ?page= asks for, within the list's `total` rows; None when the parameter is not a whole number
    of 1 or more (the caller answers 400)."""
    text = request.GET.get("page", "1")
    if not (text.isascii() and text.isdigit() and 0 < int(text) < 10**6):
        return None
    number = min(int(text), max(1, ceil(total / size)))
    return Page(number, (number - 1) * size, size)


def pager(request: HttpRequest, url_name: str, page: Page, *, shown: int, total: int) -> dict | None:
    """Links to the pages either side, keeping the filters; None when everything fits on one page."""
    if total <= page.size:
        return None
    query = request.GET.copy()

    def link(number: int) -> str:
        query["page"] = str(number)
        return f"{reverse(url_name)}?{query.urlencode()}"

    return {
        "first": page.first + 1,
        "last": page.first + shown,
        "total": total,
        "previous": link(page.number - 1) if page.number > 1 else None,
        "next": link(page.number + 1) if page.first + shown < total else None,
    }
