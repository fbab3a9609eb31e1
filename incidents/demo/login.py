"""The demo login (load_demo --login): one password for the demo superuser, made once and kept in a file that only its
owner may read (settings.DEMO_LOGIN_FILE, var/demo-login beside the SQLite database), so that every `make run` prints
the same login and the login printed signs in.

Kept rather than derived (from SECRET_KEY, say): the development key is in the repository, so a derived password
would be anyone's. Kept and printed at every start rather than printed once when the user is made: a login shown
once scrolls away with the first start's output, and the one shown last is the one a person copies. The file's
password is the demo login's: one changed in the console is set back at the next start (a login of one's own is
`manage.py createsuperuser`'s).
"""

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

PASSWORD_BYTES = 9  # 12 URL-safe characters


def demo_login(*, username: str) -> str:
    """The demo superuser's password: the kept one (made and kept on first use), set on the user, who is created if
    missing. Set only when it is not theirs already: setting it again (a new salt) would sign out their sessions."""
    path = Path(settings.DEMO_LOGIN_FILE)
    logins = _read(path)
    password = logins.get(username)
    if password is None:
        password = secrets.token_urlsafe(PASSWORD_BYTES)
        _write(path, {**logins, username: password})
    user, _ = get_user_model().objects.get_or_create(username=username)
    if not (user.is_staff and user.is_superuser and user.check_password(password)):
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
    return password


def _read(path: Path) -> dict[str, str]:
    """username -> password, one "username password" a line."""
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)  # copied or made by hand: others may not read it from now on
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def _write(path: Path, logins: dict[str, str]) -> None:
    """Written whole to a file made 0600, then renamed over the old one: never readable by others, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    temporary.unlink(missing_ok=True)  # O_EXCL below: a file left by a crash keeps neither its contents nor its mode
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write("".join(f"{name} {password}\n" for name, password in sorted(logins.items())))
    os.replace(temporary, path)
