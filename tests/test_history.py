"""The budget invariants of agent requests and follow-ups, as property tests."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.ask import agent, history
from loomcli.conversations import Conversation, Turn
from loomcli.errors import ProviderError
from loomcli.providers import Message, ToolCall


def estimate(text: str) -> int:
    return (len(text.encode("utf-8")) + 2) // 3


words = st.text(alphabet="abcdefghij klmnopé漢\n\"", min_size=0, max_size=3000)


def grep_result(n: int, text: str) -> str:
    return json.dumps({"matches": [{"path": f"f{i}.md", "line": i, "offset": i * 10,
                                    "page": None, "text": text[:400], "before": [],
                                    "after": []} for i in range(n)], "truncated": False})


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 60), words), min_size=1,
                       max_size=8),
       budget=st.integers(3000, 40000))
def test_an_agent_request_always_fits_its_budget(rounds, budget):
    messages = [Message("system", agent.INSTRUCTIONS), Message("user", "a question?")]
    for r, (calls, matches, text) in enumerate(rounds):
        ids = [f"c{r}_{i}" for i in range(calls)]
        messages.append(Message("assistant", text[:50], tool_calls=[
            ToolCall(i, "loom_grep", {"pattern": text[:20]}) for i in ids]))
        messages += [Message("tool", grep_result(matches, text), tool_call_id=i,
                             name="loom_grep") for i in ids]
    offered = agent.specs()
    fitted = agent.fit_messages(messages, offered, budget, estimate)
    assert agent.request_tokens(fitted, offered, estimate) <= budget
    # The same conversation: whole older rounds may leave, every result still follows its
    # call, and only tool results' contents change.
    assert fitted[:2] == messages[:2] and fitted[-1].name == messages[-1].name
    called: set[str] = set()
    for m in fitted:
        called.update(c.id for c in m.tool_calls)
        assert m.role != "tool" or m.tool_call_id in called
        if m.role != "tool":
            assert m in messages
    if agent.request_tokens(messages, offered, estimate) <= budget:
        assert fitted == messages
    for m in fitted:
        if m.role == "tool":
            json.loads(m.content)  # still JSON the model can read


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(turns=st.lists(st.tuples(words, words), min_size=1, max_size=15),
       budget=st.integers(0, 6000), summary_upto=st.integers(0, 15),
       model=st.sampled_from(["writes", "fails", "rambles", "none"]))
def test_recalled_turns_never_exceed_their_budget(turns, budget, summary_upto, model):
    conv = Conversation("c", "t", 0, 0, "an old summary " * 5,
                        min(summary_upto, len(turns)),
                        [Turn(i + 1, q, a) for i, (q, a) in enumerate(turns)])

    def summarize(text: str, n_words: int) -> str:
        if model == "fails":
            raise ProviderError("down")
        return "a summary " * (n_words if model == "writes" else 10 * n_words)

    got = history.recall(conv, budget, estimate, None if model == "none" else summarize)
    sent = sum(estimate(m.content) for m in got.messages()) + len(got.messages()) * 8
    assert got.tokens <= budget
    assert sent + (estimate(got.note()) if got.summary else 0) <= budget + 16
    assert [t.n for t in got.turns] == sorted(t.n for t in got.turns)
    if got.turns:  # what goes verbatim is the newest, and after what the summary reaches
        assert got.turns[-1].n == len(turns)
        assert got.turns[0].n > got.summary_upto or got.summary_upto == 0


def test_the_newest_turns_go_verbatim_and_the_rest_into_a_summary_kept_for_next_time():
    conv = Conversation("c", "t", 0, 0, turns=[Turn(i, f"question {i} " + "x" * 300,
                                                     f"answer {i} " + "y" * 300)
                                                for i in range(1, 11)])
    asked: list[str] = []

    def summarize(text: str, n_words: int) -> str:
        asked.append(text)
        return "S1"

    got = history.recall(conv, 1000, estimate, summarize)
    assert got.made and got.summary == "S1"
    assert [t.n for t in got.turns] == list(range(10 - len(got.turns) + 1, 11))
    assert got.summary_upto == 10 - len(got.turns)
    assert "question 1 " in asked[0] and f"question {got.summary_upto} " in asked[0]
    # The next follow-up reuses the kept summary and extends it with what it no longer
    # sends verbatim.
    conv.summary, conv.summary_upto = got.summary, got.summary_upto
    conv.turns.append(Turn(11, "question 11 " + "x" * 300, "answer 11 " + "y" * 300))
    again = history.recall(conv, 1000, estimate, summarize)
    assert again.summary_upto == got.summary_upto + 1
    assert asked[1].startswith("Summary so far: S1")
    assert f"question {again.summary_upto} " in asked[1] and "question 1 " not in asked[1]


def test_a_follow_up_retrieves_with_the_previous_question():
    conv = Conversation("c", "t", 0, 0, turns=[Turn(1, "how are FT-2026 invoices paid?", "a")])
    assert history.retrieval_text(conv, "and who keeps the ledger?") == \
        "how are FT-2026 invoices paid?\nand who keeps the ledger?"
    assert history.retrieval_text(None, "q") == "q"
