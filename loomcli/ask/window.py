"""The budget of one ask, in tokens: the model's window, less the answer's reserve.

Ollama silently keeps only the last `num_ctx` tokens of a longer prompt, and reloads the
model whenever `num_ctx` changes. So loom sends one stable `num_ctx` per model and
configuration: the smallest of `OLLAMA_SIZES` that holds a prompt at the configured upper
bounds (`top_k` × `file_budget_chars`) plus the answer's reserve, never above the model's
own length (or `[llm] context_tokens` when set). Other servers have their window already;
loom learns it and fits the prompt inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from loomcli.errors import ConfigError

# Ollama's num_ctx: a few sizes only, so that changing top_k a little does not reload
# the model. 2,048 is Ollama's old default, 4,096 its default on small GPUs.
OLLAMA_SIZES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
CHARS_PER_TOKEN_PLAN = 3  # chars per token when sizing num_ctx from character limits
FIXED_TOKENS_PLAN = 1000  # instructions, headers and a question, when sizing num_ctx
ANSWER_SHARE = 8  # the answer's default reserve: an eighth of the window...
ANSWER_MIN, ANSWER_MAX = 256, 2048  # ...within these bounds
WINDOW_MIN = 512  # a window smaller than this cannot hold instructions and a question


@dataclass(frozen=True)
class Budget:
    window_tokens: int  # what prompt + answer must fit
    answer_tokens: int  # reserved for the answer
    source: str  # how the window was learned
    context_tokens: int | None = None  # sent to the server (Ollama's num_ctx), if any
    model_tokens: int | None = None  # the model's own length, when it is more than sent

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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"window_tokens": self.window_tokens,
                               "answer_tokens": self.answer_tokens, "source": self.source}
        if self.model_tokens and self.model_tokens != self.window_tokens:
            out["model_tokens"] = self.model_tokens
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
