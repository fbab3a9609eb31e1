"""Strict JSON for every request body the API and the webhooks take.

Python's json module accepts what RFC 8259 leaves open or what our storage cannot hold: repeated keys (the
last one silently wins), NaN and Infinity, numbers that overflow to infinity, and nesting deep enough to
exhaust the stack. `loads` refuses each of them with a reason the sender can act on, before anything is
stored. It stays close to json.loads' speed: the checks ride on the decoder's own hooks.
"""

import json
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status
from rest_framework.exceptions import ParseError

MAX_DEPTH = 32  # arrays and objects inside one another; an event body needs 4


class JSONError(ValueError):
    """The body is not JSON we take; `reason` says why, in words for the sender."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _object(pairs: list[tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _value in pairs:
            if key in seen:
                raise JSONError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return result


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JSONError(f"the number {text[:40]} is too large")
    return value


def _constant(name: str):
    raise JSONError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0); stops counting past MAX_DEPTH."""
    level, todo = 0, [value] if type(value) in (dict, list) else []
    while todo and level <= MAX_DEPTH:
        level += 1
        children = []
        for item in todo:
            children.extend([v for v in (item.values() if type(item) is dict else item) if type(v) in (dict, list)])
        todo = children
    return level


def loads(body: bytes | str) -> Any:
    """Decode a request body: UTF-8 JSON without repeated keys, non-finite numbers or deep nesting."""
    if isinstance(body, bytes):
        if body.startswith(b"\xef\xbb\xbf"):
            raise JSONError("the body starts with a byte order mark; send UTF-8 without one")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONError(f"the body is not valid UTF-8 (byte {exc.start})") from None
    else:
        text = body
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise JSONError(f"arrays and objects nest more than {MAX_DEPTH} deep") from None
    except JSONError:
        raise
    except ValueError as exc:  # json.JSONDecodeError, and ints past Python's digit limit
        raise JSONError(f"the body is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise JSONError(f"arrays and objects nest more than {MAX_DEPTH} deep")
    if "\\u" in text and (reason := _unstorable_string(value)):
        raise JSONError(reason)
    return value


def _unstorable_string(value: Any) -> str:
    """Why a string in `value` cannot be stored, or "". Both need an escape in JSON, hence the caller's test:
    "\\ud800" decodes to a lone surrogate that no UTF-8 store can hold (a valid pair decodes to one character),
    and "\\u0000" to NUL, which PostgreSQL refuses in text and jsonb."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a string holds the NUL character (\\u0000), which PostgreSQL cannot store"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not a character"
        elif isinstance(item, dict):
            todo.extend(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return ""


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."


class StrictJSONParser(parsers.JSONParser):
    """DRF's JSON parser on `loads`: a refused body is a 400 that says why, one over the limit a 413.

    DRF reads the request stream itself, around Django's DATA_UPLOAD_MAX_MEMORY_SIZE check (which guards only
    `request.body`), so the limit is enforced here; a view with a smaller limit uses a subclass.
    """

    limit_setting = "DATA_UPLOAD_MAX_MEMORY_SIZE"  # the setting that holds the limit, read per request

    def parse(self, stream, media_type=None, parser_context=None):
        limit = getattr(settings, self.limit_setting)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(f"Request body is over the limit of {limit} bytes.")
        try:
            return loads(body)
        except JSONError as exc:
            raise ParseError(f"JSON parse error: {exc.reason}") from None
