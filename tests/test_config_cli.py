"""Config and setup like git config and llm: every message, through a real `loom`."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import write
from .llm_server import FakeLLM
from .test_ask import configure
from .test_cli_scan import loom


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


def chats(llm) -> list[dict]:
    """The chat requests the stand-in got (not its window look-ups)."""
    return [r for r in llm.requests if r["path"].endswith(("/chat", "/completions",
                                                            "/messages"))]


def test_config_list_shows_every_key_with_its_value_and_origin(loom_home):
    write(loom_home / "config.toml", '[llm]\nprovider = "openai"\nmodel = "m1"\n')
    lines = loom("config", "list").stdout.splitlines()
    assert len(lines) == len(json.loads(loom("config", "list", "--json").stdout)["settings"])
    byname = {line.split()[0]: line for line in lines}
    assert byname["llm.model"].split() == ["llm.model", "=", '"m1"', "(file)"]
    assert byname["llm.endpoint"].split() == ["llm.endpoint", "=", '"https://api.openai.com"',
                                             "(default)"]
    assert byname["ask.top_k"].split() == ["ask.top_k", "=", "5", "(default)"]
    assert byname["embeddings.endpoint"].split() == ["embeddings.endpoint", "(unset)"]
    data = json.loads(loom("config", "list", "--json").stdout)
    assert data["path"] == str(loom_home / "config.toml") and data["exists"] is True
    assert {"key": "llm.model", "value": "m1", "origin": "file"} in data["settings"]


def test_config_get_prints_the_default_when_unset(loom_home):
    assert loom("config", "get", "llm.endpoint").stdout == "http://127.0.0.1:11434\n"
    assert loom("config", "get", "ask.top_k").stdout == "5\n"
    assert loom("config", "get", "db_path").stdout == f"{loom_home / 'index.db'}\n"
    write(loom_home / "config.toml", '[llm]\nprovider = "anthropic"\n')
    assert loom("config", "get", "llm.endpoint").stdout == "https://api.anthropic.com\n"
    assert loom("config", "get", "llm.api_key_env").stdout == "ANTHROPIC_API_KEY\n"
    unset = loom("config", "get", "llm.model", check=2)
    assert unset.stderr == ("loom: llm.model is not set and has no default — set it: loom "
                            "config set llm.model VALUE\n")


def test_unknown_keys_are_refused_with_the_closest_name(loom_home):
    got = loom("config", "get", "nosuch.key", check=2)
    assert got.stderr == ("loom: unknown config key 'nosuch.key' — `loom config list` shows "
                          "every key\n")
    typo = loom("config", "set", "llm.modle", "x", check=2)
    assert typo.stderr == ("loom: unknown config key 'llm.modle' — did you mean llm.model? "
                           "`loom config list` shows every key\n")
    assert not (loom_home / "config.toml").exists()  # nothing written


def test_config_set_takes_one_folder_as_a_list(loom_home, tmp_path):
    out = loom("config", "set", "notes_dirs", str(tmp_path / "notes")).stdout
    assert out == f'notes_dirs = ["{tmp_path / "notes"}"]  ({loom_home / "config.toml"})\n'
    assert json.loads(loom("config", "get", "notes_dirs").stdout) == [str(tmp_path / "notes")]
    loom("config", "set", "ignore", '["a/", "*.tmp"]')
    assert json.loads(loom("config", "get", "ignore").stdout) == ["a/", "*.tmp"]


def test_an_invalid_configs_hint_points_at_something_that_works(loom_home):
    write(loom_home / "config.toml", "[llm\nprovider = 1\n")
    proc = loom("status", check=2)
    assert "invalid TOML" in proc.stderr and "init --force" not in proc.stderr
    assert proc.stderr.rstrip().endswith("— fix that line, or move the file aside and run "
                                         "`loom init` for a fresh one")
    (loom_home / "config.toml").rename(loom_home / "config.toml.bad")  # as the hint says
    assert loom("init").stdout == f"wrote {loom_home / 'config.toml'}\n"
    wrong = '[ask]\ntop_k = "five"\n'
    write(loom_home / "config.toml", wrong)
    proc = loom("status", check=2)
    assert proc.stderr.endswith("— fix that line or remove it to use the default\n")


def test_a_missing_key_is_said_before_any_network_call(scanned_notes, loom_home, llm):
    configure(loom_home, "openai", llm.url, api_key_env="LOOM_UNSET_KEY_Y")
    env = {k: v for k, v in os.environ.items() if k != "LOOM_UNSET_KEY_Y"}
    proc = loom("ask", "madder", env=env, check=2)
    assert proc.stderr == ("loom: no key in LOOM_UNSET_KEY_Y — set it (export "
                           "LOOM_UNSET_KEY_Y=…), or change [llm] api_key_env\n")
    assert llm.requests == []  # the server never heard of it
    # The hosted API's default endpoint without a key: the same, before any connection.
    write(loom_home / "config.toml", '[llm]\nprovider = "openai"\nmodel = "gpt-x"\n')
    env.pop("OPENAI_API_KEY", None)
    proc = loom("ask", "madder", env=env, check=2)
    assert proc.stderr.startswith("loom: no key in OPENAI_API_KEY — set it")
    # A local OpenAI-compatible server without api_key_env needs no key.
    configure(loom_home, "openai", llm.url)
    assert loom("ask", "madder", env=env).returncode == 0
    assert len(chats(llm)) == 1


def test_ask_model_for_one_call(scanned_notes, loom_home, llm):
    configure(loom_home, "ollama", llm.url)
    loom("ask", "-m", "other-model", "madder", "root")
    loom("ask", "madder", "root")
    assert [r["body"]["model"] for r in chats(llm)] == ["other-model", "test-model"]
    assert "test-model" in (loom_home / "config.toml").read_text()  # nothing saved


def test_status_json_gives_the_real_duration(notes, loom_home):
    report = json.loads(loom("scan", str(notes), "--json").stdout)
    status = json.loads(loom("status", "--json").stdout)
    assert report["duration_ms"] > 0
    assert status["last_scan"]["report"]["duration_ms"] == report["duration_ms"]
