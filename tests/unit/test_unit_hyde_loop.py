"""A HyDE passage that loops (the default model's answer to "can I get my money back if I was billed twice",
2026-12-08) or that the length limit stopped mid-sentence comes back cut where the loop starts and ending at a
sentence end; the helpers on their own (English words, Chinese characters)."""

from __future__ import annotations

import json

from helpers.scripted import ScriptedEngine, chat_reply, completion
from tiankong import Client
from tiankong.tasks.generate import LOOP_WORDS, cut_loop, end_cleanly
from tiankong.tasks.rewrite import PASSAGE_CHARS

SENTENCE = ("If you were billed twice, you would typically receive a refund of the amount you were billed and the "
            "amount you were charged for the service you were billed for. ")
LOOPED = "Yes, you can get your money back if you were billed twice. " + SENTENCE * 3


def _hyde(answer: str) -> str | None:
    engine = ScriptedEngine().on("/completion", lambda body: completion(answer, stopping_word='"}'))
    engine.on("/v1/chat/completions", lambda body: chat_reply(json.dumps({"passage": answer})))
    with Client("http://engine.test", transport=engine.transport()) as client:
        return client.rewrite("can I get my money back if I was billed twice", mode="hyde").hypothetical


def test_a_looping_passage_keeps_one_copy_and_ends_at_a_sentence_end() -> None:
    passage = _hyde(LOOPED.strip())
    assert passage is not None
    assert passage.count("you would typically receive a refund") == 1
    assert passage.endswith(".") and passage.startswith("Yes, you can")


def test_a_passage_stopped_by_the_length_limit_ends_at_a_sentence_end() -> None:
    sentences = [f"The issuer number {i} reviews a dispute within {i + 20} days of the statement." for i in range(12)]
    stopped = " ".join(sentences)[:PASSAGE_CHARS]  # mid-sentence, as the grammar's maxLength stops it
    assert not stopped.endswith(".")
    passage = _hyde(stopped)
    assert passage is not None and passage.endswith("statement.") and stopped.startswith(passage)
    assert len(passage) > PASSAGE_CHARS - len(sentences[-1]) - 2  # the last whole sentence kept


def test_a_passage_that_neither_loops_nor_runs_long_is_untouched() -> None:
    text = "Most issuers allow 60 days from the statement date to dispute a charge, and often longer"
    assert _hyde(text) == text  # no sentence end forced onto a whole answer


def test_cut_loop_on_words_and_on_chinese_characters() -> None:
    clause = " ".join(f"w{i}" for i in range(LOOP_WORDS))
    assert cut_loop(f"start {clause} and {clause} again") == (f"start {clause} and", True)
    assert cut_loop("a b c d e f g h i j") == ("a b c d e f g h i j", False)
    zh = "如果您被重复扣款，银行通常会在十四天内退还多收的金额。"
    cut, looped = cut_loop("您可以申请退款。" + zh * 3)
    assert looped and cut == "您可以申请退款。" + zh


def test_end_cleanly_prefers_a_sentence_end_past_a_third() -> None:
    assert end_cleanly("One sentence here. And then it went on, and") == "One sentence here."
    assert end_cleanly("Hi. A long clause with no end at all, going on and on,") == \
        "Hi. A long clause with no end at all, going on and on…"


def test_a_few_chinese_characters_leave_an_english_passage_read_in_words() -> None:
    """One "(北京)" switched the whole passage to 16-character runs: " bank that issued" was a loop."""
    text = "Contact the bank that issued your card (北京). The bank that issued your card will review it."
    assert cut_loop(text) == (text, False)
