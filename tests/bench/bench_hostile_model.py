"""Hostile models against `loom ask`: wall time and peak memory of one `loom` process.

    python tests/bench/bench_hostile_model.py --calls 1000        # one message, 1,000 calls
    python tests/bench/bench_hostile_model.py --endless           # a model that never stops
    python tests/bench/bench_hostile_model.py --endless --slow 0.5 --answer-timeout 10

Runs `python -m loomcli` from `--code` (default: this checkout; point it at another
checkout to compare) under `/usr/bin/time -v`, against the scripted stand-in of
tests/tool_llm_server.py (OpenAI-compatible, streamed), over a three-file corpus, with a
4,096-token window (`--window`): the calls' results do not fit, so the request is fitted.
`--kill-after S` stops a run that takes longer (reported as such).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.tool_llm_server import Call, Endless, ToolLLM, Turn  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=0)
    ap.add_argument("--endless", action="store_true")
    ap.add_argument("--slow", type=float, default=0.0, help="seconds between endless pieces")
    ap.add_argument("--answer-timeout", type=float, default=None)
    ap.add_argument("--window", type=int, default=4096, help="[llm] context_tokens")
    ap.add_argument("--code", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--kill-after", type=float, default=300)
    args = ap.parse_args()

    def brain(turns: list[Turn], tools_offered: bool) -> list:
        if args.endless:
            return ["The answer: ", Endless("more ", args.slow)]
        if tools_offered and not any(t.role == "tool" for t in turns):
            return [Call("loom_search", {"query": f"warp {i}"}) for i in range(args.calls)]
        return ["done"]

    with tempfile.TemporaryDirectory() as tmp, ToolLLM(brain) as llm:
        home, notes = Path(tmp) / "home", Path(tmp) / "notes"
        notes.mkdir()
        for name in ("a", "b", "c"):
            (notes / f"{name}.md").write_text(f"# {name}\n\nThe warp threads of {name}.\n")
        env = {**os.environ, "LOOM_HOME": str(home)}
        home.mkdir()
        extra = f"context_tokens = {args.window}\n"
        extra += f"answer_timeout_s = {args.answer_timeout}\n" if args.answer_timeout else ""
        (home / "config.toml").write_text(
            f'[llm]\nprovider = "openai"\nmodel = "m"\nendpoint = "{llm.url}"\n{extra}')
        loom = [sys.executable, "-m", "loomcli"]
        subprocess.run([*loom, "scan", str(notes)], cwd=args.code, env=env, check=True,
                       capture_output=True)
        ask = [*loom, "ask", "warp?", "--json", *(["--agent"] if args.calls else [])]
        # Its own process group: a run past --kill-after is ended with loom, not only time.
        proc = subprocess.Popen(["/usr/bin/time", "-v", *ask], cwd=args.code, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=args.kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            print(json.dumps({"killed_after_s": args.kill_after}))
            return
        done = subprocess.CompletedProcess(ask, proc.returncode, stdout, stderr)
        wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", done.stderr)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
        cpu = [float(x) for x in re.findall(r"(?:User|System) time \(seconds\): (\S+)",
                                            done.stderr)]
        loom_lines = [x for x in done.stderr.splitlines() if x.startswith("loom:")]
        answer = json.loads(done.stdout)["answer"] if done.returncode == 0 else ""
        print(json.dumps({"exit": done.returncode, "wall": wall and wall.group(1),
                          "cpu_s": round(sum(cpu), 2),
                          "peak_rss_mb": rss and round(int(rss.group(1)) / 1024, 1),
                          "answer_chars": len(answer), "loom_lines": loom_lines,
                          "requests": len(llm.chats())}))


if __name__ == "__main__":
    main()
