"""What the search box was given, and the snippets shown under each result. Plain Python, no Django: both database
paths (selectors.py) read the same Query, and the snippets are cut the same way whichever found the row."""

import re
from dataclasses import dataclass

MAX_LENGTH = 200  # characters; a longer query is refused (400), as the box's maxlength says
SNIPPET_LENGTH = 160  # characters of text around the first match

_INCIDENT_ID = re.compile(r"#?([0-9]{1,9})")  # '#123' or '123'; 9 digits stay inside an integer primary key
_QUOTES = "\"'"
# English endings dropped when a word is not found as typed: full-text search matched 'failures' to 'failure' by its
# stem, and the snippet should still mark where.
_ENDINGS = ("ing", "ies", "es", "ed", "s")


@dataclass(frozen=True)
class Query:
    text: str  # what was typed, whitespace collapsed: PostgreSQL's websearch_to_tsquery reads this
    words: tuple[str, ...]  # the words every result must hold (the plain match), quotes stripped, lower case
    excluded: tuple[str, ...]  # '-word': no result holds it
    incident_id: int | None  # '#123' or '123'
    identifier: str | None  # a single word as typed: a hostname, a run name, a rack, matched exactly or by prefix

    def __bool__(self) -> bool:
        return bool(self.words or self.incident_id is not None)


def query_parse(raw: str) -> Query:
    """The box's text as a Query. websearch syntax: words (all of them), "a phrase", -word (none of it), or. The plain
    match treats a phrase as its words and 'or' as a word; it is the development fallback, not a second engine."""
    text = " ".join(raw.split())
    words, excluded = [], []
    for token in text.split(" "):
        word = token.strip(_QUOTES).lower()
        if word.startswith("-") and len(word) > 1:
            excluded.append(word[1:])
        elif word and word not in words:
            words.append(word)
    found = _INCIDENT_ID.fullmatch(text)
    single = len(text.split(" ")) == 1 and not any(q in text for q in _QUOTES)
    return Query(
        text=text,
        words=tuple(words),
        excluded=tuple(excluded),
        incident_id=int(found.group(1)) if found else None,
        identifier=text.removeprefix("#") if single and text.removeprefix("#") else None,
    )


def snippet(
    text: str, words: tuple[str, ...], *, length: int = SNIPPET_LENGTH, markdown: bool = False
) -> list[tuple[str, bool]]:
    """About `length` characters of `text` around the first of `words` it holds, as (part, matched) pairs in order;
    the text's start when none is found. `markdown`: its marks are dropped first (a snippet is read, not rendered)."""
    plain = " ".join((_plain_text(text) if markdown else text).split())
    pattern = _pattern(plain, words)
    found = pattern.search(plain) if pattern else None
    start = 0
    if found and len(plain) > length and found.start() > length // 3:
        start = plain.rfind(" ", 0, found.start() - length // 3) + 1
    end = len(plain) if len(plain) - start <= length else plain.rfind(" ", start, start + length)
    end = start + length if end <= start else end
    window = plain[start:end]
    parts = []
    at = 0
    for match in pattern.finditer(window) if pattern else ():
        if match.start() > at:
            parts.append((window[at : match.start()], False))
        parts.append((match.group(), True))
        at = match.end()
    if at < len(window):
        parts.append((window[at:], False))
    if start > 0:
        parts.insert(0, ("… ", False))
    if end < len(plain):
        parts.append((" …", False))
    return parts


def _plain_text(markdown: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # [label](url): the label
    text = re.sub(r"^\s*(#+|>+|- \[[ xX]\])\s", " ", text, flags=re.MULTILINE)  # headings, quotes, check boxes
    return re.sub(r"\*\*|__|`+|\||-{3,}", " ", text)  # emphasis, code, table cells and rules


def _pattern(text: str, words: tuple[str, ...]) -> re.Pattern | None:
    """The words as one case-insensitive pattern, longest first; a word not in the text as typed is tried without
    its English ending."""
    lowered = text.lower()
    found = set()
    for word in words:
        if word in lowered:
            found.add(re.escape(word))
        elif _stem(word) in lowered:
            found.add(re.escape(_stem(word)) + r"\w*")  # the whole word the stem begins
    if not found:
        return None
    return re.compile("|".join(sorted(found, key=len, reverse=True)), re.IGNORECASE)


def _stem(word: str) -> str:
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word
