"""ask: many questions about one text, the text read once.

Every question's prompt starts with the same system line and the text; only what follows differs (the
question and how to answer it). The questions run one after another on one engine slot (``SlotPin``: the first
answer's ``id_slot`` goes with every later call, ``cache_prompt`` on), so the engine prefills the text once and
each later question costs its own few tokens. Putting the question first, as a classify prompt does, would make
every question prefill the text again (measured in ``benchmarks/prefix_reuse.py``).

Each question is answered exactly as it would be alone — the same prompt, the same label-constrained
probabilities (``choose_flow``) or the same validated structured answer (``constrained_flow``, fast-forwarded
where the schema allows) — so asking eight questions at once gives the eight answers of asking them one by one.

* ``yes_no``  → ``label`` ("yes"/"no"), ``probability`` = P(yes), ``scores``;
* ``choice``  → ``label`` among ``labels``, ``scores`` of every label;
* ``score``   → ``label`` "1"…"5", ``scores``, ``score`` = the expected value Σ k·P(k);
* ``extract`` → ``data`` valid against ``schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError, TiankongError
from ..structured.constraints import schema_constraint
from ..structured.flow import Flow, choose_flow, constrained_flow
from ..structured.prompts import CHOOSE_INDEXED, language, schema_prompt
from ..structured.slots import SlotPin

QuestionType = Literal["choice", "yes_no", "score", "extract"]
MAX_QUESTIONS = 32
SCORE_LABELS = ["1", "2", "3", "4", "5"]
#: everything that does not depend on the question is before the text (cached with it); what follows the text is
#: as short as it can be, since every question prefills it: on a CPU prefill costs about the same per token at
#: any batch size (Qwen2.5-0.5B, 2 cores: ~8 ms per token whether 15 or 150 at once)
SYSTEM = {"en": ("Read the text, then answer the question about it: a yes/no question with yes or no, a choice "
                 "with one of its options only, a score with a number from 1 (lowest) to 5 (highest), anything "
                 "else with JSON only."),
          "zh": ("阅读文本，然后回答关于它的问题：是非题回答 yes 或 no，选择题只回答一个选项，打分题用 1（最低）到 "
                 "5（最高）的数字回答，其他问题只用 JSON 回答。")}
TEXT = {"en": "Text:\n{text}\n\nQuestion: {question}{how}", "zh": "文本：\n{text}\n\n问题：{question}{how}"}
HOW = {
    "yes_no": {"en": " (yes/no)", "zh": "（yes/no）"},
    "choice": {"en": " Options: {options}.", "zh": " 选项：{options}。"},
    "score": {"en": " (1-5)", "zh": "（1-5）"},
    "extract": {"en": "\n{schema}", "zh": "\n{schema}"},
}


@dataclass
class Question:
    id: str
    type: QuestionType
    question: str
    labels: list[str] | None = None
    schema: dict[str, Any] | None = None


@dataclass
class Answer:
    id: str
    type: str
    label: str | None = None
    scores: dict[str, float] | None = None
    probability: float | None = None
    score: float | None = None
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"id": self.id, "type": self.type}
        for key in ("label", "scores", "probability", "score"):
            if getattr(self, key) is not None:
                found[key] = getattr(self, key)
        if self.type == "extract":
            found["data"] = self.data
        return found


@dataclass
class Answers:
    """Every question's answer, in the order asked, and what the engine read."""

    answers: list[Answer]
    #: prompt tokens of all questions' prompts, and those the engine evaluated (the rest came from its cache)
    prompt_tokens: int = 0
    evaluated_tokens: int = 0
    completion_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    def by_id(self) -> dict[str, Answer]:
        return {a.id: a for a in self.answers}

    def to_json(self) -> dict[str, Any]:
        return {"answers": [a.to_json() for a in self.answers],
                "usage": {"prompt_tokens": self.prompt_tokens, "evaluated_prompt_tokens": self.evaluated_tokens,
                          "completion_tokens": self.completion_tokens,
                          "total_tokens": self.prompt_tokens + self.completion_tokens}}


def _question_error(message: str, hint: str | None = None) -> ConfigError:
    return ConfigError(message, hint=hint, param="questions")


def check_questions(questions: list[Question], limit: int = MAX_QUESTIONS) -> list[Question]:
    """Refuse what cannot be answered before the engine is asked (one ``ConfigError`` naming the question)."""
    if not questions:
        raise _question_error("questions is empty", 'give at least one {"id", "type", "question"}')
    if len(questions) > limit:
        raise _question_error(f"at most {limit} questions per text (got {len(questions)})",
                              "split the questions into several requests")
    seen: set[str] = set()
    for index, q in enumerate(questions):
        where = f"questions[{index}]"
        if q.id in seen:
            raise _question_error(f"{where}: the id {q.id!r} is used twice", "give every question its own id")
        seen.add(q.id)
        if not q.question.strip():
            raise _question_error(f"{where}: the question is empty")
        if q.type == "choice":
            labels = q.labels or []
            if len(labels) < 2 or len({x.strip() for x in labels}) != len(labels) or not all(x.strip() for x in labels):
                raise _question_error(f"{where}: a choice needs at least two distinct, non-empty labels",
                                      'e.g. "labels": ["billing", "bug", "other"]')
        elif q.labels is not None:
            raise _question_error(f"{where}: labels apply to a choice question only")
        if q.type == "extract":
            if not isinstance(q.schema, dict):
                raise _question_error(f"{where}: an extract question needs a JSON Schema object in 'schema'")
            try:  # before the engine reads the text for the questions before it, and naming the question
                schema_constraint(q.schema)
            except TiankongError as exc:  # its own class (invalid_schema, schema_not_supported), named
                exc.message, exc.param = f"{where}: {exc.message}", "questions"
                exc.args = (exc.message if not exc.hint else f"{exc.message} — {exc.hint}",)
                raise
        elif q.schema is not None:
            raise _question_error(f"{where}: schema applies to an extract question only")
    return questions


def question_messages(text: str, q: Question) -> list[dict[str, Any]]:
    """Text first: the system line and the text are the same for every question about it."""
    lang = language(text)
    how = HOW[q.type][lang]
    if q.type == "choice":
        how = how.format(options=", ".join(q.labels or []))
    elif q.type == "extract":
        how = how.format(schema=schema_prompt(q.schema or {}, lang)[0])
    return [{"role": "system", "content": SYSTEM[lang]},
            {"role": "user", "content": TEXT[lang].format(text=text, question=q.question, how=how)}]


def _indexed_messages(text: str, q: Question) -> tuple[list[dict[str, Any]], list[str]]:
    """The choice question with numbered options, and their numbers as the labels."""
    lang = language(text)
    numbers = [str(i) for i in range(1, len(q.labels or []) + 1)]
    options = "\n".join(f"{n}. {label}" for n, label in zip(numbers, q.labels or [], strict=True))
    how = " " + CHOOSE_INDEXED[lang].format(options=options)  # as HOW's lines, after the question
    return [{"role": "system", "content": SYSTEM[lang]},
            {"role": "user", "content": TEXT[lang].format(text=text, question=q.question, how=how)}], numbers


def ask_flow(text: str, questions: list[Question], *, model: str | None = None,
             limit: int = MAX_QUESTIONS) -> Flow[Answers]:
    """Every question about ``text``, one after another on one slot (multi-label classify and guard's policies
    ask theirs this way too, with their own ``limit``)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("text is empty", hint="pass the text the questions are about")
    check_questions(questions, limit)
    pin = SlotPin()
    known: dict[Any, Any] = {}  # the engine's end-of-turn token and tokenized labels, kept across questions
    answers: list[Answer] = []
    completion = 0
    for q in questions:
        messages = question_messages(text, q)
        if q.type == "extract":
            constraint, _ = schema_constraint(q.schema)
            result = yield from constrained_flow(messages, constraint, model=model, pin=pin)
            completion += result.usage.completion_tokens
            answers.append(Answer(q.id, q.type, data=result.data))
            continue
        labels = ["yes", "no"] if q.type == "yes_no" else SCORE_LABELS if q.type == "score" else list(q.labels or [])
        # choice labels the tokenizer splits into byte pieces are asked by number, as classify asks them
        indexed = _indexed_messages(text, q) if q.type == "choice" else None
        scores = yield from choose_flow(messages, labels, indexed, pin=pin, known=known)
        label = max(labels, key=lambda x: scores[x])
        completion += 1
        answer = Answer(q.id, q.type, label=label, scores={x: scores[x] for x in labels})
        if q.type == "yes_no":
            answer.probability = scores["yes"]
        elif q.type == "score":
            answer.score = sum(int(x) * scores[x] for x in labels)
        answers.append(answer)
    return Answers(answers, pin.sent, pin.evaluated, completion)
