"""Roles are Django groups: viewer (reads), oncall (acts on incidents), admin (settings, tokens, approvals)."""

VIEWER = "viewer"
ONCALL = "oncall"
ADMIN = "admin"
GROUPS = (VIEWER, ONCALL, ADMIN)


def roles(user) -> set[str]:
    """The person's groups, read once a request."""
    if not getattr(user, "is_authenticated", False):
        return set()
    cached = getattr(user, "_fleetops_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._fleetops_groups = cached
    return cached


def can_act(user) -> bool:
    """May acknowledge, assign, note, resolve: on-call engineers and admins."""
    return bool(getattr(user, "is_superuser", False)) or bool(roles(user) & {ONCALL, ADMIN})


def is_admin(user) -> bool:
    return bool(getattr(user, "is_superuser", False)) or ADMIN in roles(user)
