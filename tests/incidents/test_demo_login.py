"""The demo login (incidents/demo/login.py): made once, kept readable by its owner only, the same at every start."""

import stat

import pytest

from incidents.demo.login import demo_login


@pytest.fixture
def kept(settings, tmp_path):
    settings.DEMO_LOGIN_FILE = tmp_path / "var" / "demo-login"
    return settings.DEMO_LOGIN_FILE


def test_it_makes_the_login_once_and_gives_it_again(db, kept, django_user_model):
    password = demo_login(username="demo")
    user = django_user_model.objects.get(username="demo")
    assert user.is_superuser and user.is_staff and user.check_password(password)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text() == f"demo {password}\n"
    hashed = user.password
    assert demo_login(username="demo") == password
    user.refresh_from_db()
    assert user.password == hashed  # not set again: a new salt would sign out the sessions of the last start


def test_a_password_changed_in_the_console_is_set_back(db, kept, django_user_model):
    password = demo_login(username="demo")
    user = django_user_model.objects.get(username="demo")
    user.set_password("changed-in-the-admin")
    user.save()
    assert demo_login(username="demo") == password
    user.refresh_from_db()
    assert user.check_password(password)


def test_a_new_database_gets_the_kept_login(db, kept, django_user_model):
    password = demo_login(username="demo")
    django_user_model.objects.filter(username="demo").delete()  # var/fleetops.sqlite3 removed, var/demo-login kept
    assert demo_login(username="demo") == password
    assert django_user_model.objects.get(username="demo").check_password(password)


def test_a_file_others_may_read_is_closed_and_other_logins_kept(db, kept):
    kept.parent.mkdir()
    kept.write_text("ops s3cret-ops\n")
    kept.chmod(0o644)
    password = demo_login(username="demo")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert kept.read_text() == f"demo {password}\nops s3cret-ops\n"
    assert demo_login(username="ops") == "s3cret-ops"
