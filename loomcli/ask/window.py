"""The budget of one ask, in tokens: the model's window, less the answer's reserve.

Ollama silently keeps only the last `num_ctx` tokens of a longer prompt, and reloads the
model whenever `num_ctx` changes. So loom sends one stable `num_ctx` per model and
configuration: the smallest of `OLLAMA_SIZES` that holds a prompt at the configured upper
bounds (`top_k` × `file_budget_chars`) plus the answer's reserve, never above the model's
own length (or `[llm] context_tokens` when set). Other servers have their window already;
loom learns it and fits the prompt inside.

The server's own count of each prompt (`Provider.prompt_count`) teaches loom how its
estimate compares with the model's tokenizer: `learned_ratio` (real / estimated, per
provider, endpoint and model, at most `RATIO_KEEP` counts each, kept across processes
by `ratios`) scales the estimate once `RATIO_EVIDENCE` counts agree, never below
`RATIO_FLOOR` nor below the highest recent count plus `RATIO_SAFETY`. A count lower than
a cached prompt could explain is not evidence; Ollama's silent cut is told apart by the
numbers it leaves (`silent_cut`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from loomcli.ask import ratios
from loomcli.errors import ConfigError

# Ollama's num_ctx: a few sizes only, so that changing top_k a little does not reload
# the model. 2,048 is Ollama's old default, 4,096 its default on small GPUs.
OLLAMA_SIZES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
CHARS_PER_TOKEN_PLAN = 3  # chars per token when sizing num_ctx from character limits
FIXED_TOKENS_PLAN = 1000  # instructions, headers and a question, when sizing num_ctx
ANSWER_SHARE = 8  # the answer's default reserve: an eighth of the window...
ANSWER_MIN, ANSWER_MAX = 256, 2048  # ...within these bounds
WINDOW_MIN = 512  # a window smaller than this cannot hold instructions and a question
RATIO_KEEP = ratios.KEEP  # the server's counts kept per model (the newest)
RATIO_EVIDENCE = 3  # counts needed before the estimate is scaled below 1
RATIO_SAFETY = 1.1  # the ratio used: the highest recent real/estimated, plus a tenth
# The ratio is never below this: the estimate with its margin over-counts English prose
# by about 1.5 (bench_window.py; real/estimated 0.63-0.70), Chinese and Japanese barely.
RATIO_FLOOR = 0.6
RATIO_CEILING = 2.0  # a model whose tokenizer counts up to twice the estimate
RATIO_MODELS = ratios.MODELS  # models remembered at most (least recently counted go)
# A count below this share of the estimate is not a whole prompt's (a cut, or tokens
# read from a prompt cache that an older Ollama leaves out of prompt_eval_count): English
# of long common words counts 0.49 of the estimate (cl100k_base), nothing measured less.
PLAUSIBLE = 0.35
# An Ollama count on a cut's numbers (below) and under this share of the estimate is a
# cut: one that keeps half the window counts about 0.55 of a prompt that filled it.
CUT_SHARE = 0.6


@dataclass(frozen=True)
class Budget:
    window_tokens: int  # what prompt + answer must fit
    answer_tokens: int  # reserved for the answer
    source: str  # how the window was learned
    context_tokens: int | None = None  # sent to the server (Ollama's num_ctx), if any
    model_tokens: int | None = None  # the model's own length, when it is more than sent
    ratio: float = 1.0  # the model's tokens per estimated token, learned (1: not yet)

    @property
    def prompt_tokens(self) -> int:
        """The most the prompt may take."""
        return self.window_tokens - self.answer_tokens

    def reserving(self, tokens: int) -> Budget:
        """The budget with `tokens` of the prompt's room kept for something else (a
        follow-up's earlier turns); the answer's reserve is unchanged."""
        if tokens <= 0:
            return self
        return replace(self, window_tokens=max(self.answer_tokens + 1,
                                               self.window_tokens - tokens))

    def halved(self) -> Budget:
        """For a server that refused the prompt anyway: half the prompt's room."""
        return replace(self, answer_tokens=self.answer_tokens + self.prompt_tokens // 2)

    def within(self, tokens: int, source: str) -> Budget:
        """The budget for a server that really holds only `tokens` (a silent cut)."""
        window = max(WINDOW_MIN, min(self.window_tokens, tokens))
        return replace(self, window_tokens=window, source=source,
                       answer_tokens=min(self.answer_tokens, answer_reserve(window, None)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"window_tokens": self.window_tokens,
                               "answer_tokens": self.answer_tokens, "source": self.source}
        if self.model_tokens and self.model_tokens != self.window_tokens:
            out["model_tokens"] = self.model_tokens
        if self.ratio != 1.0:
            out["token_ratio"] = round(self.ratio, 3)
        return out


def answer_reserve(window: int, configured: int | None) -> int:
    if configured is not None:
        if configured < 1:
            raise ConfigError(f"[llm] max_answer_tokens must be 1 or more, got {configured}",
                              "set a number of tokens, e.g. 1024, or remove the key")
        return min(configured, window // 2)
    return max(ANSWER_MIN, min(ANSWER_MAX, window // ANSWER_SHARE, window // 2))


def plan(provider_name: str, window: int, source: str, *, top_k: int, file_budget_chars: int,
         max_answer_tokens: int | None) -> Budget:
    """The budget for a model whose window is `window` tokens (learned from `source`)."""
    if window < WINDOW_MIN:
        raise ConfigError(f"the model's window of {window} tokens ({source}) is too small "
                          "for instructions and a question",
                          f"set [llm] context_tokens to {WINDOW_MIN} or more")
    if provider_name != "ollama":
        return Budget(window, answer_reserve(window, max_answer_tokens), source)
    if source == "config":
        num_ctx = window  # the user chose it
    else:
        wanted = math.ceil(top_k * file_budget_chars / CHARS_PER_TOKEN_PLAN) + FIXED_TOKENS_PLAN
        fits = [s for s in OLLAMA_SIZES if s - answer_reserve(s, max_answer_tokens) >= wanted]
        num_ctx = min(fits[0] if fits else OLLAMA_SIZES[-1], window)
    return Budget(num_ctx, answer_reserve(num_ctx, max_answer_tokens), source,
                  context_tokens=num_ctx, model_tokens=window)


def _key(provider: Any) -> tuple[str, str, str]:
    return (str(provider.name), str(provider.endpoint), str(provider.model))


def learned_ratio(provider: Any) -> float:
    """The model's tokens per estimated token: 1 until `RATIO_EVIDENCE` counts say
    otherwise, then the highest recent one times `RATIO_SAFETY`, within the bounds."""
    seen = ratios.seen(_key(provider))
    if not seen:
        return 1.0
    top = max(seen) * RATIO_SAFETY
    if top < 1.0 and len(seen) < RATIO_EVIDENCE:
        return 1.0
    return min(RATIO_CEILING, max(RATIO_FLOOR, top))


def observe(provider: Any, estimated: int, counted: int | None) -> bool:
    """Keep the server's count of a prompt estimated at `estimated` tokens (unscaled);
    False when the count is not a whole prompt's and was not kept."""
    if counted is None or estimated <= 0 or counted < estimated * PLAUSIBLE:
        return False
    ratios.add(_key(provider), counted / estimated)
    return True


def silent_cut(counted: int | None, estimated: int, num_ctx: int | None) -> int | None:
    """The window an Ollama server really kept, when its prompt_eval_count shows that it
    cut the prompt; else None. Ollama cuts a prompt longer than its context to the
    context (older runners: "truncating input prompt" limit=N new=N) or to half of it
    plus two (newer ones), and counts only what it kept. Tokens read from its prompt
    cache lower the count of older versions too, so a low count alone proves nothing:
    it must also land on one of those numbers, for the num_ctx sent or a size Ollama
    picks by itself."""
    if counted is None or num_ctx is None or counted >= estimated * CUT_SHARE:
        return None
    for size in sorted({num_ctx, *OLLAMA_SIZES}):
        if abs(counted - size) <= 2 or abs(counted - (size // 2 + 2)) <= 2:
            return size
    return None
