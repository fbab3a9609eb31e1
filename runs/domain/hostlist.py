"""Host lists in Slurm's notation: gpu-[0001-0004,0009] for gpu-0001, gpu-0002, gpu-0003, gpu-0004, gpu-0009.

A fault on a 2,048-node run names 2,048 hosts: printed one by one they fill screens (issue 20). `fold` writes a
set of hostnames as scontrol would (`scontrol show hostlist`), `expand` reads it back. The last run of digits in a
name is the range; a zero-padded number keeps its width (gpu-0009, not gpu-9). A name with a character of the
notation itself ([ ] ,) or without digits stays as it is. Ranges are folded on the last number only, as Slurm does
for one-dimensional names: rack-aware names such as r01-n02 fold per rack.

ClusterShell's NodeSet does this and more, but parses every name as a pattern (a hostname with brackets is misread)
and took 130-230 ms to fold 16,384 names here, most of the incident page's 300 ms budget; this takes a few ms.
"""

import functools
import re
from collections import defaultdict
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")
_DIGITS = "0123456789"
_TOKEN = re.compile(r"^([^\[\],]*)\[([0-9,\-]+)\]([^\[\],]*)$")
_LIMIT = 1_000_000  # hosts one expression may expand to: a typo like n[1-999999999] is refused, not allocated


def fold(hostnames: Iterable[str]) -> str:
    """The hostnames, deduplicated and sorted, in Slurm's notation; "" for none."""
    return ",".join(fold_parts(hostnames))


def fold_parts(hostnames: Iterable[str]) -> list[str]:
    """fold's parts, in order: each a name as it is or one prefix[ranges]suffix. A name with the notation's own
    characters is one part of its own, so a page lists parts without reading the text back (expand would misread it)."""
    return list(_fold_parts(frozenset(hostnames)))


@functools.lru_cache(maxsize=16)
def _fold_parts(hostnames: frozenset[str]) -> tuple[str, ...]:
    """Kept for the last few sets: a page folds an incident's hosts for its alerts and again for its nodes, and polls
    fold them again; hashing 16,384 names costs about 1 ms, folding them 20-45."""
    literal: set[str] = set()
    numbered: dict[tuple[str, str], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for name in hostnames:
        if "[" in name or "]" in name or "," in name:
            literal.add(name)
            continue
        stem = name.rstrip(_DIGITS)  # the common case, a name ending in its number: no regular expression
        if len(stem) < len(name):
            prefix, digits, suffix = stem, name[len(stem) :], ""
        elif (match := _NUMBERED.match(name)) is not None:
            prefix, digits, suffix = match.groups()
        else:
            literal.add(name)
            continue
        width = len(digits) if digits[0] == "0" and len(digits) > 1 else 0
        numbered[(prefix, suffix)][width].add(int(digits))
    parts = [(name, name) for name in literal]
    for (prefix, suffix), by_width in numbered.items():
        for width, numbers in _merge_unpadded(by_width).items():
            parts.append((f"{prefix}{min(numbers):0{width}d}{suffix}", _part(prefix, suffix, width, numbers)))
    # By the first name's number, then by the name itself: gpu-1329 and gpu-01329 tie on the number.
    return tuple(text for _, text in sorted(parts, key=lambda part: (natural(part[0]), part[0])))


def _merge_unpadded(by_width: dict[int, set[int]]) -> dict[int, set[int]]:
    """Unpadded numbers as wide as a padded group join it: n10 belongs with n[01-09] as n[01-10]."""
    merged = {width: set(numbers) for width, numbers in by_width.items()}
    for number in list(merged.get(0, ())):
        width = len(str(number))
        if width > 1 and width in merged:
            merged[width].add(number)
            merged[0].discard(number)
    return {width: numbers for width, numbers in merged.items() if numbers}


def _part(prefix: str, suffix: str, width: int, numbers: set[int]) -> str:
    if len(numbers) == 1:
        return f"{prefix}{next(iter(numbers)):0{width}d}{suffix}"
    return f"{prefix}[{','.join(_ranges(sorted(numbers), width))}]{suffix}"


def _ranges(numbers: list[int], width: int) -> list[str]:
    ranges, start = [], numbers[0]
    for previous, number in zip(numbers, [*numbers[1:], None], strict=True):
        if number != previous + 1:
            ranges.append(f"{start:0{width}d}" if start == previous else f"{start:0{width}d}-{previous:0{width}d}")
            start = number
    return ranges


@functools.lru_cache(maxsize=65_536)
def natural(name: str) -> tuple:
    """gpu-2 before gpu-10: digits compare as numbers. Kept per name: the overview sorts every node on each load."""
    return tuple(int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", name))


def expand(expression: str) -> list[str]:
    """The hostnames an expression names, in its order. Raises ValueError on a malformed one."""
    hosts: list[str] = []
    for token in split(expression):
        if "[" not in token and "]" not in token:
            hosts.append(token)
            continue
        match = _TOKEN.match(token)
        if match is None:
            raise ValueError(f"{token!r}: one bracketed range of numbers per name, such as gpu-[0001-0008]")
        prefix, ranges, suffix = match.groups()
        for piece in ranges.split(","):
            first, dash, last = piece.partition("-")
            if not first or (dash and not last):
                raise ValueError(f"{piece!r} in {token!r}: a number or a range a-b")
            last = last or first
            start, end = int(first), int(last)
            if end < start:
                raise ValueError(f"{piece!r} in {token!r}: the range runs backwards")
            if len(hosts) + end - start + 1 > _LIMIT:
                raise ValueError(f"{expression[:80]!r} names more than {_LIMIT:,} hosts")
            width = len(first) if first[0] == "0" and len(first) > 1 else 0
            hosts.extend(f"{prefix}{number:0{width}d}{suffix}" for number in range(start, end + 1))
    return hosts


def split(expression: str) -> list[str]:
    """The expression's names and bracketed patterns: commas inside brackets do not split."""
    tokens, depth, current = [], 0, []
    for char in expression.strip():
        if char == "," and depth == 0:
            tokens.append("".join(current))
            current = []
            continue
        depth += (char == "[") - (char == "]")
        if depth not in (0, 1):
            raise ValueError(f"{expression[:80]!r}: brackets do not nest")
        current.append(char)
    tokens.append("".join(current))
    if depth:
        raise ValueError(f"{expression[:80]!r}: a bracket is not closed")
    return [token.strip() for token in tokens if token.strip()]
