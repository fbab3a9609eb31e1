"""The error answers of the API, declared once for every operation (a drf-spectacular postprocessing hook).

drf-spectacular documents what a view's decorator names, usually only its 200. The errors come from shared
machinery (authentication, scopes, pagination, the parser, the size limit) and are the same everywhere, so they
are added here from what each operation has: security, query or path parameters, a request body. A client
generated from the schema, and the schema fuzz test (tests/test_schema_fuzz.py), then expect exactly these.
"""

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


def _errors_of(operation: dict) -> dict[str, str]:
    parameters = operation.get("parameters", [])
    body = operation.get("requestBody")
    errors = {}
    if operation.get("security"):
        errors["401"] = "No API token, or an unknown, revoked or expired one."
        errors["403"] = "The token lacks the operation's scope (or the signed-in user the role)."
    if body or any(p["in"] == "query" for p in parameters):
        errors["400"] = "A parameter or the body is invalid; `errors` names each field and the reason."
    if any(p["in"] == "path" for p in parameters) or any(p["name"] == "page" for p in parameters):
        errors["404"] = "No such object, or no such page."
    if body:
        errors["413"] = "The body is over the size limit."
        if "*/*" not in body.get("content", {}):
            errors["415"] = "The body's content type is not one the operation takes."
    return errors


def error_responses(result, generator, request, public):
    for item in result["paths"].values():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            # An operation with an error shape of its own (PagerDuty's) keeps it for the errors added here.
            content = responses.get("400", {}).get("content") or ERROR
            for code, description in _errors_of(operation).items():
                responses.setdefault(code, {"content": content, "description": description})
    return result
