"""The console's pages kept for PAGE_CACHE_S seconds, shared by the people who would see the same page, so that a
page asked again within that time costs a cache lookup instead of its queries and its rendering.

Why: a page that reads a 131,072-GPU fleet costs a few hundred milliseconds of CPU (the overview draws 16,384
nodes), and an on-call team keeps the same few pages open, each polling every 5-10 s (the board, the overview's live
figures). Twenty people on two cores would queue behind each other's identical work (docs/PERFORMANCE.md, "Pages at
131,072 GPUs").

What a kept page promises:
- It is the page as it was read at most PAGE_CACHE_S ago, and says when: base.html stamps every page with the time
  its figures were read, so a kept page shows its own age.
- It is the page this person would have been shown: it is shared only by people with the same roles (groups, staff,
  superuser) and time zone, on the same path and htmx request; a page that shows more of who someone is says so
  (`personal`: the incident page offers "assign to me" and "take command" to those who can act, unless they are
  assigned or command it: on-call engineers in the same place share it). What is anyone's own in every page, their
  name and their CSRF token, is rendered as a placeholder and put in for each request (`_personal`).
- What this person just did shows at once: any write of theirs through the console (a POST, PUT, PATCH or DELETE
  that did not fail) stamps their session; a kept page older than their last write is read anew for them (and kept
  for the others), whichever server process answers (the session is in the database; each process keeps its pages).
- Events and other people's actions show within PAGE_CACHE_S, the same as the pages' own polls.

PAGE_CACHE_S=0 turns it off (the test suite does, but for the tests of this module).
"""

import functools
import hashlib
import time
from collections.abc import Callable

from django.conf import settings
from django.contrib.messages import get_messages
from django.core.cache import caches
from django.http import HttpResponse
from django.middleware.csrf import get_token
from django.utils import timezone
from django.utils.html import escape

from fleetops.roles import roles

CACHE = "pages"  # settings.CACHES: a cache of its own, so that pages never push out the record's figures
WRITES = "console_writes"  # session key: when this browser last wrote through the console (time.time_ns())
MAX_BYTES = 4 * 1024 * 1024  # a larger page is served but not kept
# Rendered in place of what is each person's own, and replaced for each request: letters and digits only, so that
# escaping leaves them as they are.
CSRF_PLACEHOLDER = "keptpagecsrftoken0000000000000000000000000000000000000000000000"
NAME_PLACEHOLDER = "keptpageusername0000"
_SHARED = "_page_shared"  # request attribute: this request renders a page to be kept
# Request attribute set by fleetops.replica: the time (time.time_ns()) as of which this request reads the record
# from a read replica; None or absent: it reads the primary, as of now.
READ_AS_OF = "_page_read_as_of"
_HEADERS = ("HX-Request", "HX-Target", "HX-Trigger", "HX-Boosted", "HX-History-Restore-Request")
_KEPT_HEADERS = ("Content-Type", "Vary", "HX-Trigger", "HX-Reswap", "HX-Retarget")
_SAFE = ("GET", "HEAD", "OPTIONS", "TRACE")


def page_cached(view=None, *, personal: Callable[..., str] | None = None):
    """Decorate a GET page view (under login_required): answer from the cache when the same page was read for
    someone who would see the same within PAGE_CACHE_S. `personal(request, *args, **kwargs)`, if given, says what
    else of the person the page depends on (the incident page: whether they command it or are assigned, if they can
    act); it is asked only when the page may be kept."""
    if view is None:
        return functools.partial(page_cached, personal=personal)

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        key = _key(request, functools.partial(personal, request, *args, **kwargs) if personal else None)
        if key is None:
            return view(request, *args, **kwargs)
        store = caches[CACHE]
        kept = store.get(key)
        if kept is not None and kept[0] >= request.session.get(WRITES, 0):
            _read_at, status, headers, content = kept
            response = HttpResponse(content, status=status)
            for name, value in headers:
                response[name] = value
            return _personal(request, response)
        read_at = getattr(request, READ_AS_OF, None) or time.time_ns()  # a replica's record is as of then
        setattr(request, _SHARED, True)
        response = view(request, *args, **kwargs)
        setattr(request, _SHARED, False)
        if _keepable(response):
            headers = [(name, response[name]) for name in _KEPT_HEADERS if response.has_header(name)]
            store.set(key, (read_at, response.status_code, headers, response.content), settings.PAGE_CACHE_S)
        return _personal(request, response)

    return wrapped


def page_context(request) -> dict:
    """Context processor: how long a page may be kept, how far behind the primary a read replica it was read from
    may be, and the signed-in person's name, as base.html shows them; placeholders for the name and the CSRF token
    while a page to be kept is rendered."""
    context = {"page_cache_s": settings.PAGE_CACHE_S}
    as_of = getattr(request, READ_AS_OF, None)
    if as_of is not None:
        context["page_replica_lag_s"] = max(0.0, (time.time_ns() - as_of) / 1e9)
    if getattr(request, _SHARED, False):
        return context | {"csrf_token": CSRF_PLACEHOLDER, "page_user_name": NAME_PLACEHOLDER}
    user = getattr(request, "user", None)
    return context | {"page_user_name": user.get_username() if user is not None else ""}


class ConsoleWritesMiddleware:
    """Stamps the session of a browser that wrote through the console (after AuthenticationMiddleware): its next
    pages are read anew. A sign-out has emptied the session by then and is left alone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.method not in _SAFE and response.status_code < 400 and _signed_in(request):
            request.session[WRITES] = time.time_ns()
        return response


def _signed_in(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and request.session.session_key)


def _key(request, personal: Callable[[], str] | None) -> str | None:
    if settings.PAGE_CACHE_S <= 0 or request.method != "GET" or not _signed_in(request):
        return None
    if not request.COOKIES.get(settings.CSRF_COOKIE_NAME):
        return None  # the page would set the CSRF cookie: a response with a cookie is never kept
    if len(get_messages(request)):
        return None  # a message waits for this person (base.html shows it): their page alone, neither read nor kept
    user = request.user
    parts = [
        request.get_full_path(),
        *(request.headers.get(name, "") for name in _HEADERS),
        timezone.get_current_timezone_name(),
        ",".join(sorted(roles(user))),
        f"staff={user.is_staff},superuser={user.is_superuser}",
        personal() if personal else "",
    ]
    return "page:" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _personal(request, response):
    """The page with this person's name and CSRF token where the placeholders are."""
    content = response.content
    if CSRF_PLACEHOLDER.encode() in content or NAME_PLACEHOLDER.encode() in content:
        response.content = content.replace(CSRF_PLACEHOLDER.encode(), get_token(request).encode()).replace(
            NAME_PLACEHOLDER.encode(), escape(request.user.get_username()).encode()
        )
    return response


def _keepable(response) -> bool:
    return (
        response.status_code in (200, 286)
        and not response.streaming
        and not response.cookies
        and len(response.content) <= MAX_BYTES
    )
