"""What agent mode and conversations cost, on the kernel's admin guide.

    python tests/bench/bench_agent.py [--work /tmp/loom-bench-agent] [--loops 100]

No real LLM is reachable from the machines this runs on, so the gain in answer quality of
agent mode cannot be measured here, and none is claimed. What is measured, against
scripted models on loopback (tests/tool_llm_server.py) speaking Ollama's protocol:

1. Overhead per step: loom's own time per tool step (running the tool through
   operations.Corpus, capping its result, fitting the request to the window), beside a
   plain ask's retrieval and excerpts in the same run (`Corpus.prompt`): the ratio says
   what one step adds compared with what every ask already pays.
2. Tool-result sizes: the JSON characters each tool returns to the model (after the cap,
   `TOOL_RESULT_CHARS`), for grep, read and search calls drawn from the corpus's words.
3. The window never exceeded: 100 randomized scripted loops (random tools, arguments,
   windows of 2k-32k tokens, max_steps) through the real Ollama provider and the
   stand-in that silently cuts a prompt longer than `num_ctx`; counted: prompts cut,
   the largest prompt as a share of its window (the stand-in's own token count).
4. A follow-up's request size over 20 turns, at 4k and 32k windows: tokens sent per turn
   (it must level off under the window, not grow with the conversation).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.tool_llm_server import Call, Limits, ToolLLM, Turn  # noqa: E402

ADMIN_GUIDE = Path("/usr/share/doc/linux-doc-6.1/Documentation/admin-guide")
WORD = re.compile(r"[A-Za-z_]{6,}")


def corpus_dir(work: Path) -> Path:
    """The admin guide's .rst files, unpacked once."""
    dest = work / "admin-guide"
    if dest.exists():
        return dest
    for src in ADMIN_GUIDE.rglob("*.rst.gz"):
        out = dest / src.relative_to(ADMIN_GUIDE).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(src.read_bytes()))
    return dest


def setup(work: Path) -> tuple[object, list[str]]:
    import os

    os.environ["LOOM_HOME"] = str(work / "home")
    notes = corpus_dir(work)
    if not (work / "home" / "index.db").exists():
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                       capture_output=True)
    words = sorted({w for p in notes.rglob("*.rst") for w in
                    WORD.findall(p.read_text(errors="replace")[:20000])})
    from loomcli import config
    from loomcli.operations import Corpus

    return Corpus(config.load()), words


def provider_for(url: str, window: int | None = None):
    from loomcli import config, providers

    cfg = config.Config(path=Path("/nonexistent"), raw={"llm": {
        "provider": "ollama", "model": "bench", "endpoint": url,
        **({"context_tokens": window} if window else {})}})
    return providers.from_config(cfg)


def random_brain(rng: random.Random, words: list[str], paths: list[str]):
    def brain(turns: list[Turn], tools: bool) -> list:
        if not tools or rng.random() < 0.1:
            return ["An answer quoting " + " ".join(rng.sample(words, 5)) + "."]
        out = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            kind = rng.choice(["grep", "get", "search"])
            if kind == "grep":
                out.append(Call("loom_grep", {"pattern": rng.choice(words),
                                              "context": rng.choice([0, 0, 2, 10])}))
            elif kind == "get":
                out.append(Call("loom_get_file", {"path": rng.choice(paths),
                                                  "offset": rng.randrange(0, 20000),
                                                  "length": rng.choice([500, 4000, 50000])}))
            else:
                out.append(Call("loom_search", {"query": " ".join(rng.sample(words, 3)),
                                                "excerpt_chars": rng.choice([800, 2000, 8000])}))
        return out

    return brain


def run_loop(corpus, provider, question: str, max_steps: int):
    from loomcli.ask import agent, turn
    from loomcli.operations import AGENT_MAX_CALLS, HISTORY_SHARE, TOOL_RESULT_CHARS

    plan = turn.budget(corpus, provider, question, HISTORY_SHARE)
    limits = agent.Limits(max_steps, AGENT_MAX_CALLS, TOOL_RESULT_CHARS,
                          plan.budget.window_tokens, plan.budget.answer_tokens,
                          plan.budget.context_tokens)
    return agent.run(corpus, provider, question, limits=limits, estimate=plan.estimate)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench-agent"))
    ap.add_argument("--loops", type=int, default=100)
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    corpus, words = setup(args.work)
    paths = [f.path for f in corpus.files().files]
    rng = random.Random(args.seed)
    print(f"corpus: {len(paths)} files of the kernel admin guide")

    # 1 + 2: overhead per step and result sizes, over the randomized loops (3).
    step_ms: list[float] = []
    sizes: dict[str, list[int]] = {"loom_grep": [], "loom_get_file": [], "loom_search": []}
    cut = refused = requests = 0
    share_max = 0.0
    loop_overhead: list[float] = []
    for i in range(args.loops):
        window = rng.choice([2048, 4096, 8192, 32768])
        with ToolLLM(random_brain(rng, words, paths), Limits(window=window)) as llm:
            provider = provider_for(llm.url)
            start = time.perf_counter()
            try:
                out = run_loop(corpus, provider, f"question {i}: " + " ".join(
                    rng.sample(words, 4)), rng.randint(1, 8))
            except Exception as exc:  # a refusal or an error is counted, not hidden
                refused += 1
                print(f"  loop {i}: {exc}")
                continue
            wall = (time.perf_counter() - start) * 1000
            chats = llm.chats()
        requests += len(chats)
        cut += sum(1 for c in chats if c.get("cut"))
        refused += sum(1 for c in chats if c.get("refused"))
        share_max = max(share_max, *(c["tokens"] / c["window"] for c in chats if "tokens" in c))
        for s in out.steps:
            step_ms.append(s.ms)
            sizes[s.tool].append(s.result_chars)
        if out.steps:
            loop_overhead.append(wall / max(1, out.calls))
    ask_ms = []
    for _ in range(20):
        q = " ".join(rng.sample(words, 4))
        start = time.perf_counter()
        corpus.prompt(q)
        ask_ms.append((time.perf_counter() - start) * 1000)
    med_step = statistics.median(step_ms) if step_ms else 0.0
    med_ask = statistics.median(ask_ms)
    print("\n1. overhead per step (loom's side; the model's time is the stand-in's)")
    print(f"   tool step: median {med_step:.1f} ms, p95 "
          f"{sorted(step_ms)[int(len(step_ms) * 0.95)]:.1f} ms over {len(step_ms)} steps")
    print(f"   one model round trip incl. request fitting, loopback: median "
          f"{statistics.median(loop_overhead):.1f} ms")
    print(f"   plain ask retrieval+excerpts (Corpus.prompt): median {med_ask:.1f} ms")
    print(f"   ratio step / plain retrieval: {med_step / med_ask:.2f}")
    print("\n2. tool-result sizes (JSON characters sent to the model, after the cap)")
    for tool, got in sizes.items():
        if got:
            print(f"   {tool:14s} n={len(got):4d} median {statistics.median(got):7.0f} "
                  f"p95 {sorted(got)[int(len(got) * 0.95)]:7d} max {max(got):7d}")
    print(f"\n3. window: {args.loops} randomized loops, {requests} requests: {cut} cut, "
          f"{refused} refused; largest prompt {share_max:.2f} of its window")

    # 4: follow-ups over 20 turns.
    print("\n4. follow-up request size (tokens, the stand-in's count) by turn")
    from loomcli.conversations import Conversations

    def chatty(turns: list[Turn], tools: bool) -> list:
        if turns and turns[0].content.startswith("Summarise the conversation"):
            return ["Summary: questions about " + " ".join(rng.sample(words, 20))]
        return ["An answer of some length: " + " ".join(rng.sample(words, 150))]

    for window in (4096, 32768):
        with ToolLLM(chatty, Limits(window=window)) as llm:
            provider = provider_for(llm.url)
            cid = None
            for n in range(20):
                q = f"follow-up {n}: " + " ".join(rng.sample(words, 4))
                result = corpus.ask(q, provider=provider, conversation_id=cid)
                cid = result.conversation_id or cid
            chats = [c for c in llm.chats()
                     if not c["turns"][0].content.startswith("Summarise")]
        tokens = [c["tokens"] for c in chats]
        print(f"   window {window:6d}: " + " ".join(str(t) for t in tokens))
        print(f"                  max {max(tokens)} ({max(tokens) / window:.2f} of the window),"
              f" cut {sum(1 for c in chats if c['cut'])}")
        with Conversations.open() as store:
            assert len(store.get(cid).turns) == 20
    print("\nAnswer quality: not measured (no real LLM reachable here).")
    json.dumps({})


if __name__ == "__main__":
    main()
