"""Settings that are policies rather than knobs: fixed for every environment, so kept out of settings.py, which
imports them (the OpenAPI schema's description and the Content-Security-Policy)."""

SPECTACULAR_SETTINGS = {
    "TITLE": "FleetOps API",
    "DESCRIPTION": "Event intake (CloudEvents 1.0) and the fleet record of GPU training runs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The error answers (401, 403, 400, 404, 413, 415) of every operation, declared in one place.
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "runs.api.schema.error_responses"],
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "runs.domain.lifecycle.RUN_STATES",
        "NodeStateEnum": "runs.domain.cloudevents.NODE_STATE_CHOICES",
        "CheckpointStatusEnum": "runs.models.CHECKPOINT_STATUS_CHOICES",
        "IncidentStatusEnum": "incidents.models.INCIDENT_STATUS_CHOICES",
        "AlertStatusEnum": "incidents.models.ALERT_STATUS_CHOICES",
    },
}

# Content-Security-Policy (django-csp 4): scripts only from our own static files: no inline script, no inline
# event handler, no eval (plotly.js and htmx need none). style-src needs 'unsafe-inline': plotly.js inserts <style>
# elements as it draws, and so do htmx (its indicator style) and the Swagger UI page; without it Chromium reports
# those as violations. tests/browser/test_csp.py finds none with this policy.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}
