"""A request body over the limit is a 413 everywhere, before anything reads it.

Django guards only `request.body` with DATA_UPLOAD_MAX_MEMORY_SIZE, and answers a body over it with 400
(RequestDataTooBig is a SuspiciousOperation); DRF reads the stream itself and is not guarded at all. A sender
that gets 400 thinks its content is wrong; 413 says it is the size. The API's parser (fleetops.jsonparse)
enforces smaller per-endpoint limits the same way; this is the ceiling for every path, console forms included.
"""

from django.conf import settings
from django.http import HttpResponse, JsonResponse


class BodyLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = request.META.get("CONTENT_LENGTH") or "0"
        if limit is not None and length.isdigit() and int(length) > limit:
            detail = f"Request body is over the limit of {limit} bytes."
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": detail}, status=413)
            return HttpResponse(detail, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
