"""`[store]` config through a real `loom`: a PostgreSQL URL is checked when written and
when read, never holds a password in the file, and `loom status` names the backend
(without a password, wherever the URL came from). No server is needed here."""

from __future__ import annotations

import json
import os

from .conftest import write
from .test_cli_scan import loom


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("loom: ") and " — " in lines[0], stderr
    return lines[0]


def test_config_set_refuses_a_url_holding_a_password(loom_home):
    for url in ("postgresql://ann:hunter2@db.example/loom",
                "postgresql://db.example/loom?sslmode=require&password=hunter2"):
        run = loom("config", "set", "store.url", url, check=2)
        line = one_line(run.stderr)
        assert "key 'store.url' holds a password" in line
        assert "export PGPASSWORD, put it in ~/.pgpass, or set [store] password_env" in line
        assert "hunter2" not in run.stderr + run.stdout
    assert not (loom_home / "config.toml").exists()
    run = loom("config", "set", "store.read_urls", "postgresql://u:hunter2@replica/loom",
               check=2)
    assert "key 'store.read_urls' holds a password" in one_line(run.stderr)


def test_config_set_keeps_a_url_with_its_parameters(loom_home):
    url = "postgresql://ann@db.example:5433/loom?sslmode=verify-full"
    loom("config", "set", "store.url", url)
    assert loom("config", "get", "store.url").stdout.strip() == url
    loom("config", "set", "store.read_urls", "postgresql://replica1/loom")
    assert json.loads(loom("config", "get", "store.read_urls").stdout) == [
        "postgresql://replica1/loom"]
    loom("config", "set", "store.password_env", "LOOM_PG_PASSWORD")
    text = (loom_home / "config.toml").read_text()
    assert "[store]" in text and 'password_env = "LOOM_PG_PASSWORD"' in text


def test_a_url_that_is_not_postgresql_is_one_line(loom_home):
    run = loom("config", "set", "store.url", "mysql://db/loom", check=2)
    assert "key 'store.url' is not a PostgreSQL URL (it must start with postgresql://)" \
        in one_line(run.stderr)
    # Written by hand, it is found when read, naming file and key.
    write(loom_home / "config.toml", '[store]\nurl = "db.example/loom"\n')
    line = one_line(loom("status", check=2).stderr)
    assert f"{loom_home / 'config.toml'}: key 'store.url' is not a PostgreSQL URL" in line
    write(loom_home / "config.toml", '[store]\nurl = "postgresql://u:hunter2@h/loom"\n')
    run = loom("status", check=2)
    assert "key 'store.url' holds a password" in one_line(run.stderr)
    assert "hunter2" not in run.stderr


def test_a_bad_url_in_the_environment_says_how_to_mend_the_environment(loom_home, monkeypatch):
    monkeypatch.setenv("LOOM_DATABASE_URL", "mysql://u:hunter2@db/loom")
    line = one_line(loom("status", check=2).stderr)
    assert line.startswith("loom: $LOOM_DATABASE_URL is not a PostgreSQL URL (it must start "
                           "with postgresql://)"), line
    assert line.endswith("export LOOM_DATABASE_URL=postgresql://HOST/DB, or unset "
                         "LOOM_DATABASE_URL") and "hunter2" not in line


def test_status_names_the_sqlite_backend(loom_home, notes):
    loom("scan", str(notes))
    data = json.loads(loom("status", "--json").stdout)
    index = str(loom_home / "index.db")
    assert (data["backend"], data["store"], data["replicas"]) == ("sqlite", f"sqlite: {index}",
                                                                  [])
    assert data["index"] == index  # kept as it was: keys are added, none renamed
    assert f"index:  sqlite: {index} (" in loom("status").stdout


def test_database_url_from_the_environment_is_never_shown_with_its_password(loom_home):
    env = {**os.environ, "LOOM_DATABASE_URL": "postgresql://ann:hunter2@127.0.0.1:9/loom"}
    run = loom("status", "--json", env=env, check=None)
    assert "hunter2" not in run.stdout + run.stderr
    if run.returncode == 0:
        data = json.loads(run.stdout)
        assert (data["backend"], data["store"]) == ("postgresql", "postgresql: 127.0.0.1:9/loom")
    run = loom("config", "list", env=env)
    assert "hunter2" not in run.stdout + run.stderr


def test_password_env_naming_an_unset_variable_is_one_line(loom_home):
    write(loom_home / "config.toml", '[store]\nurl = "postgresql://127.0.0.1:9/loom"\n'
                                     'password_env = "LOOM_TEST_NO_SUCH_VAR"\n')
    env = {k: v for k, v in os.environ.items() if k != "LOOM_TEST_NO_SUCH_VAR"}
    line = one_line(loom("status", env=env, check=2).stderr)
    assert "[store] password_env names $LOOM_TEST_NO_SUCH_VAR, which is not set" in line
