"""CPU time of recalling a conversation whose kept answer is 7.8 MB of mixed scripts
(issue 35, item 18): the follow-up's history within a 5,000-token budget.

    python tests/bench/bench_recall.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loomcli.ask import history, tokens  # noqa: E402
from loomcli.conversations import Conversation, Turn  # noqa: E402
from tests.test_ask_budget import mixed_answer  # noqa: E402


def main() -> None:
    answer = mixed_answer(7_800_000)
    for kept in ([Turn(1, "q1?", answer)],
                 [Turn(1, "q1?", answer), Turn(2, "q2?", "a short answer")]):
        conv = Conversation("c1", "t", 0.0, 0.0, turns=kept)
        started = time.process_time()
        got = history.recall(conv, 5000, tokens.estimate)
        print(f"{len(kept)} turn(s), answer of {len(answer):,} characters: recall "
              f"{time.process_time() - started:.2f} s CPU, {got.tokens:,} tokens recalled")


if __name__ == "__main__":
    main()
