"""What the user sees of ask, through real `loom` processes against the loopback LLM
stand-in: settings checked where written, conversations kept only when wanted and per
corpus, a locked or damaged conversations file, follow-ups about the conversation itself,
sources that `loom get` opens."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]


def loom(*args: str, env: dict | None = None, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, input=stdin,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.fixture
def llm():
    with FakeLLM() as server:
        server.behaviour.answer = ["Madder root gives a red dye ", "[dyes/madder.md]."]
        yield server


@pytest.fixture
def dyes(tmp_path, loom_home, llm) -> Path:
    notes = tmp_path / "notes"
    filler = "".join(f"Line {i} of the dyer's notebook, about mordants and vats.\n"
                     for i in range(3000))
    write(notes / "dyes" / "madder.md", "# Madder\n\n" + filler
          + "Madder root gives a red dye called alizarin; alum fixes it.\n" + filler)
    write(notes / "dyes" / "woad.md", "# Woad\n\nWoad leaves give a blue dye, indigotin.\n")
    assert loom("scan", str(notes)).returncode == 0
    write(loom_home / "config.toml", f'[llm]\nprovider = "ollama"\nmodel = "test-model"\n'
          f'endpoint = "{llm.url}"\ntimeout_s = 20\n')
    return notes


def chats(llm: FakeLLM) -> list[dict]:
    return llm.chats()


def turns(path: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT conversation_id, n, question FROM turns "
                          "ORDER BY rowid").fetchall()


# -- settings checked where they are written ------------------------------------------------

def test_endpoint_must_be_an_http_url_when_set_and_when_read(dyes, loom_home, llm):
    config = loom_home / "config.toml"
    before = config.read_text()
    for bad, why in [("not-a-url", "it must start with http:// or https://"),
                     ("ftp://host/x", "it must start with http:// or https://"),
                     ("http://", "it names no host"),
                     ("http://host:port", "Port could not be cast")]:
        done = loom("config", "set", "llm.endpoint", bad)
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and "key 'llm.endpoint' is not an http(s) URL" \
            in done.stderr and why in done.stderr, done.stderr
        assert config.read_text() == before  # nothing written
    assert loom("config", "set", "llm.endpoint", "https://example.test:8443/v1").returncode == 0
    # A bad value already in the file: one line naming the key at ask time, no request.
    config.write_text(before.replace(llm.url, "not-a-url"))
    done = loom("ask", "which dye is red?")
    assert done.returncode == 2
    assert done.stderr.startswith(f"loom: {config}: key 'llm.endpoint' is not an http(s) URL")
    assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr
    assert chats(llm) == []
    assert loom("search", "madder").returncode == 0  # reading the notes needs no LLM


def test_booleans_take_what_git_takes_and_unset_removes_a_key(loom_home):
    config = loom_home / "config.toml"
    write(config, "# mine\n[ask]\ntop_k = 3  # my choice\n")
    for word, value in [("yes", "true"), ("off", "false"), ("1", "true"), ("No", "false"),
                        ("on", "true"), ("0", "false"), ("TRUE", "true")]:
        done = loom("config", "set", "ask.agent", word)
        assert done.returncode == 0, done.stderr
        assert loom("config", "get", "ask.agent").stdout == value + "\n"
    bad = loom("config", "set", "ask.agent", "maybe")
    assert bad.returncode == 2 and "git's words work too: yes/no, on/off, 1/0" in bad.stderr
    # Written by hand as git would take it, the file's word is read too.
    write(config, '[ask]\nagent = "yes"\nkeep = "off"\n')
    assert loom("config", "get", "ask.agent").stdout == "true\n"
    assert loom("config", "get", "ask.keep").stdout == "false\n"
    write(config, "# mine\n[ask]\ntop_k = 3  # my choice\nagent = true\n")
    done = loom("config", "unset", "ask.agent")
    assert done.returncode == 0 and done.stdout.startswith("unset ask.agent (was true)")
    assert config.read_text() == "# mine\n[ask]\ntop_k = 3  # my choice\n"
    again = loom("config", "unset", "ask.agent")
    assert again.returncode == 0 and "was not set" in again.stdout
    assert loom("config", "unset", "ask.agnet").stderr.startswith(
        "loom: unknown config key 'ask.agnet' — did you mean ask.agent?")


# -- conversations are the user's ------------------------------------------------------------

def test_no_keep_stores_nothing_and_creates_nothing(dyes, loom_home, llm):
    kept = loom_home / "conversations.db"
    done = loom("ask", "--no-keep", "which dye is red?", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["conversation_id"] is None
    assert not kept.exists()
    with open(loom_home / "config.toml", "a") as f:
        f.write("[ask]\nkeep = false\n")
    assert loom("ask", "which dye is blue?").returncode == 0
    assert not kept.exists()
    assert not [p.name for p in loom_home.iterdir() if p.name.startswith("conversations")]
    # A kept conversation continued without keeping: read, never written.
    first = loom("ask", "--keep", "which dye is red?", "--json")
    cid = json.loads(first.stdout)["conversation_id"]
    files = {p.name: p.read_bytes() for p in loom_home.glob("conversations.db*")}
    follow = loom("ask", "-c", "and which mordant fixes it?", "--json")
    assert follow.returncode == 0, follow.stderr
    assert "which dye is red?" in json.dumps(chats(llm)[-1]["body"])  # the turn went along
    assert json.loads(follow.stdout)["conversation_id"] is None
    assert {p.name: p.read_bytes() for p in loom_home.glob("conversations.db*")} == files
    assert [t[1:] for t in turns(kept)] == [(1, "which dye is red?")]
    assert turns(kept)[0][0] == cid


def test_conversations_rm_and_clear(dyes, loom_home):
    ids = [json.loads(loom("ask", q, "--json").stdout)["conversation_id"]
           for q in ("which dye is red?", "which dye is blue?", "what fixes madder?")]
    done = loom("conversations", "rm", ids[0])
    assert (done.returncode, done.stdout) == (0, f"removed {ids[0]}\n")
    listed = json.loads(loom("conversations", "--json").stdout)["conversations"]
    assert [c["id"] for c in listed] == [ids[2], ids[1]]
    gone = loom("conversations", "rm", ids[0])
    assert gone.returncode == 2 and gone.stderr == (
        f"loom: no conversation '{ids[0]}' — `loom conversations` lists them\n")
    assert loom("ask", "--cid", ids[0], "x").returncode == 2
    done = loom("conversations", "--clear")
    assert done.returncode == 0 and done.stdout.startswith("removed 2 conversations")
    assert loom("conversations").stdout == ""
    raw = (loom_home / "conversations.db").read_bytes()
    assert b"which dye is blue?" not in raw  # deleted text does not linger in the file


def test_each_corpus_keeps_its_own_conversations_over_http(tmp_path, loom_home, llm):
    from .test_http import Server

    root = tmp_path / "corpora"
    write(root / "a" / "notes" / "a.md", "# A\nThe red dye is madder.\n")
    write(root / "b" / "notes" / "b.md", "# B\nThe secret dye of b is kermes.\n")
    write(loom_home / "config.toml", f'[llm]\nprovider = "ollama"\nmodel = "test-model"\n'
          f'endpoint = "{llm.url}"\n')
    s = Server("--corpus-root", str(root))
    try:
        for name in ("a", "b"):
            assert s.call("POST", "/scan", {"corpus": name})[0] == 200
        status, b_first = s.call("POST", "/ask", {"corpus": "b", "question": "which dye?"})
        assert status == 200, b_first
        cid = b_first["conversation_id"]
        asked = len(chats(llm))
        status, crossed = s.call("POST", "/ask", {"corpus": "a", "question": "and then?",
                                                  "conversation_id": cid})
        stream = s.call("POST", "/ask", {"corpus": "a", "question": "and then?",
                                         "conversation_id": cid, "stream": True})
        status_b, b_next = s.call("POST", "/ask", {"corpus": "b", "question": "and then?",
                                                   "conversation_id": cid})
    finally:
        s.stop()
    assert status == 404 and crossed["error"].startswith(f"no conversation '{cid}'")
    assert stream[0] == 404
    assert len(chats(llm)) == asked + 1  # a's attempts sent nothing; b's follow-up did
    assert status_b == 200 and b_next["conversation_id"] == cid
    assert "which dye?" in json.dumps(chats(llm)[-1]["body"])
    assert [t[1:] for t in turns(root / "b" / "conversations.db")] == [
        (1, "which dye?"), (2, "and then?")]
    assert not (root / "a" / "conversations.db").exists()
    assert not (loom_home / "conversations.db").exists()


# -- a locked or damaged conversations file --------------------------------------------------

HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
print("released", flush=True)
"""


def test_a_turn_locked_out_past_the_wait_is_said_in_one_line(dyes, loom_home, llm):
    first = loom("ask", "which dye is red?", "--json")
    cid = json.loads(first.stdout)["conversation_id"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK,
                               str(loom_home / "conversations.db")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        done = loom("ask", "-c", "and which mordant fixes it?")
    finally:
        holder.communicate("go\n", timeout=30)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("Madder root gives a red dye [dyes/madder.md].")
    assert "Sources:" in done.stdout
    assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr
    assert done.stderr.startswith(f"loom: this turn was not kept: "
                                  f"{loom_home / 'conversations.db'} stayed locked by "
                                  "another process for 10 s")
    assert [t[1:] for t in turns(loom_home / "conversations.db")] == [(1, "which dye is red?")]
    # Once the lock is free the same follow-up is kept.
    again = loom("ask", "-c", "and which mordant fixes it?", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["conversation_id"] == cid


def test_a_turn_holding_damaged_json_is_read_around(dyes, loom_home, llm):
    cid = json.loads(loom("ask", "which dye is red?", "--json").stdout)["conversation_id"]
    loom("ask", "-c", "and blue?")
    with sqlite3.connect(loom_home / "conversations.db") as db:
        db.execute("UPDATE turns SET sources = '[\"dyes/madder.md\", {' WHERE n = 1")
        db.execute("UPDATE turns SET steps = '{\"not\": \"a list\"}' WHERE n = 2")
    follow = loom("ask", "-c", "and which mordant fixes it?", "--json")
    assert follow.returncode == 0, follow.stderr
    assert json.loads(follow.stdout)["conversation_id"] == cid
    assert "which dye is red?" in json.dumps(chats(llm)[-1]["body"])
    listed = loom("conversations", "--json")
    assert json.loads(listed.stdout)["conversations"][0]["turns"] == 3


# -- a follow-up about the conversation itself -----------------------------------------------

def test_follow_ups_about_the_conversation_are_sent_with_it(dyes, loom_home, llm):
    assert loom("ask", "which dye is red?").returncode == 0
    llm.behaviour.answer = ["Krapp gibt einen roten Farbstoff ", "[dyes/madder.md]."]
    german = loom("ask", "-c", "now into German")
    assert german.returncode == 0, german.stderr
    llm.behaviour.answer = ["Krapp: rot [dyes/madder.md]."]
    shorter = loom("ask", "-c", "shorter?", "--json")
    assert shorter.returncode == 0, shorter.stderr
    sent = json.dumps(chats(llm)[-1]["body"], ensure_ascii=False)
    assert "Krapp gibt einen roten Farbstoff" in sent and "shorter?" in sent
    out = json.loads(shorter.stdout)
    assert out["answer"] == "Krapp: rot [dyes/madder.md]."
    assert out["citations"] == ["dyes/madder.md"] and out["used"] == []
    assert [t[2] for t in turns(loom_home / "conversations.db")] == [
        "which dye is red?", "now into German", "shorter?"]
    human = loom("ask", "-c", "and again?")
    assert "dyes/madder.md  (earlier in the conversation)" in human.stdout
    # A new question that matches nothing still calls nothing.
    none = loom("ask", "zqxv wvut")
    assert none.returncode == 1 and "no indexed file matches" in none.stderr


# -- sources that `loom get` opens -----------------------------------------------------------

def test_sources_print_path_at_offset_that_get_opens_at_the_passage(dyes, loom_home, llm):
    done = loom("ask", "which red dye does madder root give? alizarin")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("  dyes/madder.md@"))
    where = line.split()[0]
    offset = int(where.rsplit("@", 1)[1])
    assert offset > 0  # a long note: the window that was sent, not the top
    got = loom("get", where, "--length", "8000")
    assert got.returncode == 0 and "alizarin" in got.stdout
    assert got.stdout == loom("get", "dyes/madder.md", "--offset", str(offset),
                              "--length", "8000").stdout
    both = loom("get", where, "--offset", "3")
    assert both.returncode == 2 and both.stderr.count("\n") == 1


# -- a terminal that shows what is happening -------------------------------------------------

class Terminal:
    """`loom` on a real pseudo-terminal (its controlling terminal: Ctrl-C is a SIGINT from
    the line discipline, as at a keyboard). `expect` waits for text to appear."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        import fcntl
        import signal
        import struct
        import termios

        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))

        def controlling() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        base = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        self.proc = subprocess.Popen([*LOOM, *args], stdin=slave, stdout=slave, stderr=slave,
                                     env={**base, "TERM": "xterm", **(env or {})},
                                     preexec_fn=controlling)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, after: int = 0, timeout: float = 60) -> int:
        """Read until `text` shows after position `after`; where it starts."""
        import select
        import time

        deadline = time.monotonic() + timeout
        while (at := self.seen.find(text, after)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came; got {self.seen[-2000:]!r}"
            poller = select.poll()  # not select(): a busy test process may hold fds past 1024
            poller.register(self.master, select.POLLIN)
            if poller.poll(left * 1000):
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the other end closed: the process ended
                    chunk = b""
                assert chunk, f"{text!r} never came; the process ended: {self.seen[-2000:]!r}"
                self.seen += chunk.decode("utf-8", "replace")
        return at

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def reading(self, timeout: float = 60) -> None:
        """Until the program's main thread sleeps (blocked reading the terminal, after a
        prompt is printed). readline prints its prompt before it waits for a key; a Ctrl-C
        sent in between is seen only at the next key, as at a real terminal."""
        import time
        from pathlib import Path

        deadline = time.monotonic() + timeout
        stat = Path(f"/proc/{self.proc.pid}/stat")
        while stat.read_text().rpartition(")")[2].split()[0] != "S":
            assert time.monotonic() < deadline, "the chat never waited for a key"
            time.sleep(0.005)

    def wait(self) -> int:
        import contextlib

        with contextlib.suppress(OSError):
            while chunk := os.read(self.master, 65536):
                self.seen += chunk.decode("utf-8", "replace")
        code = self.proc.wait(timeout=60)
        os.close(self.master)
        return code


STATUS = "sending 2 files, "


def test_a_status_line_while_waiting_on_a_terminal_never_in_a_pipe(dyes, loom_home, llm):
    llm.behaviour.pause_after = 0  # the model "thinks": no token yet
    term = Terminal("ask", "which dye is red?")
    assert llm.paused.wait(60)
    at = term.expect(STATUS)
    end = term.expect("to test-model…", at)
    assert "tokens" in term.seen[at:end]
    llm.resume.set()
    answer = term.expect("Madder root gives a red dye")
    assert term.wait() == 0
    cleared = term.seen.find("\r\x1b[K", end)
    assert end < cleared < answer  # the line is wiped before the answer starts
    assert "\x1b[35mdyes/madder.md@" in term.seen  # sources coloured on a terminal
    llm.behaviour.pause_after = None
    piped = loom("ask", "which dye is red?")
    assert piped.returncode == 0 and piped.stderr == ""
    assert "\x1b[" not in piped.stdout
    plain = Terminal("ask", "which dye is red?", env={"NO_COLOR": "1"})
    assert plain.wait() == 0 and "dyes/madder.md@" in plain.seen
    assert "\x1b[35m" not in plain.seen  # NO_COLOR: no colour (the status line stays)
    forced = loom("ask", "--color", "always", "which dye is red?")
    assert "\x1b[35mdyes/madder.md@" in forced.stdout and forced.stderr == ""
    assert loom("ask", "--color", "sometimes", "x").stderr.startswith(
        "loom: Invalid value for '--color': 'sometimes' is not one of auto, always, never")


def test_verbose_details_come_on_their_own_lines_before_the_answer(dyes, loom_home, llm):
    done = subprocess.run([*LOOM, "ask", "-v", "which dye is red?"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    context = next(i for i, x in enumerate(lines) if x.startswith("loom: context: window "))
    before = next(i for i, x in enumerate(lines) if x.startswith("loom: timings: retrieve "))
    answer = next(i for i, x in enumerate(lines) if x.startswith("Madder root gives"))
    after = next(i for i, x in enumerate(lines) if x.startswith("loom: timings: first_token"))
    assert context < before < answer < after
    assert lines[answer] == "Madder root gives a red dye [dyes/madder.md]."  # nothing glued


def test_chat_edits_lines_keeps_history_and_ctrl_c_stops_only_the_answer(dyes, loom_home,
                                                                          llm):
    term = Terminal("chat")
    prompt = term.expect("> ")
    # Line editing: two steps left, insert the missing letter.
    term.type("which dye is rd?\x1b[D\x1b[De\r")
    first = term.expect("Madder root gives a red dye", prompt)
    again = term.expect("> ", first)
    term.type("\x1b[A\r")  # Up: the question before, asked again
    second = term.expect("Madder root gives a red dye", again)
    prompt = term.expect("> ", second)
    llm.behaviour.pause_after = 1  # the next answer stops after its first piece
    term.type("and which mordant fixes it?\r")
    assert llm.paused.wait(60)
    streaming = term.expect("Madder root gives a red dye", prompt)
    term.type("\x03")  # Ctrl-C while the answer streams
    stopped = term.expect("answer stopped (not kept)", streaming)
    llm.behaviour.pause_after = None
    llm.resume.set()
    prompt = term.expect("> ", stopped)
    term.reading()
    term.type("\x03")  # Ctrl-C at the prompt: a fresh prompt, the chat goes on
    prompt = term.expect("> ", prompt + 2)
    term.type("and blue?\r")
    last = term.expect("Madder root gives a red dye", prompt)
    term.expect("> ", last)
    term.type("\x04")  # Ctrl-D leaves
    assert term.wait() == 0
    questions = [q["body"]["messages"][-1]["content"] for q in chats(llm)]
    assert [q.rsplit("Question: ", 1)[-1].strip() for q in questions] == [
        "which dye is red?", "which dye is red?", "and which mordant fixes it?", "and blue?"]
    kept = turns(loom_home / "conversations.db")
    assert [t[1:] for t in kept] == [(1, "which dye is red?"), (2, "which dye is red?"),
                                     (3, "and blue?")]
    assert len({t[0] for t in kept}) == 1
    history = (loom_home / "chat_history").read_text()
    assert "which dye is red?" in history and "and blue?" in history
    assert (loom_home / "chat_history").stat().st_mode & 0o077 == 0
    # The history is there for the next chat too.
    term = Terminal("chat")
    prompt = term.expect("> ")
    term.type("\x1b[A")
    term.expect("and blue?", prompt)
    term.type("\x15exit\r")  # Ctrl-U clears the line; `exit` leaves
    assert term.wait() == 0


def test_search_hits_carry_the_byte_offset_and_page_of_their_snippet(dyes, loom_home):
    hits = json.loads(loom("search", "alizarin", "--json").stdout)["hits"]
    assert [h["path"] for h in hits] == ["dyes/madder.md"] and hits[0]["page"] is None
    got = loom("get", "dyes/madder.md", "--offset", str(hits[0]["offset"]), "--length", "8")
    assert got.stdout == "alizarin"
    from .conftest import FIXTURES

    pdf = FIXTURES / "notes" / "manuals" / "field-guide.pdf"
    write(dyes / "guide.pdf", pdf.read_bytes())
    loom("scan", str(dyes))
    grep = json.loads(loom("grep", "-i", r"\btension", "--path", "guide.pdf",
                           "--json").stdout)["matches"][0]
    hit = next(h for h in json.loads(loom("search", "tension", "--json").stdout)["hits"]
               if h["path"] == "guide.pdf")
    assert (hit["offset"], hit["page"]) == (grep["offset"], grep["page"]) and hit["page"] > 1
