"""Training records for ``tiankong lora train``: JSONL of ``{prompt, answer}`` or ``{messages}`` → chat turns."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

Message = dict[str, Any]


@dataclass
class Example:
    """One training example: the conversation up to the answer, and the answer the model must learn."""

    messages: list[Message]
    answer: str


def _example(record: Any, where: str) -> Example:
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: a record must be a JSON object")
    if "messages" in record:
        messages = record["messages"]
        if (not isinstance(messages, list) or len(messages) < 2 or not all(isinstance(m, dict) for m in messages)
                or messages[-1].get("role") != "assistant"):
            raise ConfigError(f"{where}: messages must be a list of {{role, content}} ending with the assistant answer")
        return Example([dict(m) for m in messages[:-1]], str(messages[-1].get("content", "")))
    prompt, answer = record.get("prompt"), record.get("answer")
    if not isinstance(prompt, str) or not isinstance(answer, str) or not prompt or not answer:
        raise ConfigError(f"{where}: needs string fields prompt and answer (or messages)",
                          hint='e.g. {"prompt": "What is 2+2?", "answer": "ACK: 4"}')
    system = record.get("system")
    head = [{"role": "system", "content": str(system)}] if system else []
    return Example(head + [{"role": "user", "content": prompt}], answer)


def load_examples(path: str | Path) -> list[Example]:
    """Every record of a JSONL file (blank lines skipped); ``ConfigError`` naming the first bad line."""
    path = Path(path)
    try:  # utf-8-sig: a byte-order mark opens the file, not the first record
        lines = path.read_bytes().decode("utf-8-sig").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", hint="check the path") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not valid UTF-8 (byte {exc.start})",
                          hint="convert it first, e.g. `iconv -f GBK -t UTF-8`") from None
    examples = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path}:{number} is not JSON", hint="one JSON object per line") from None
        examples.append(_example(record, f"{path}:{number}"))
    if len(examples) < 2:
        raise ConfigError(f"{path} has {len(examples)} records", hint="give at least a few dozen examples")
    return examples


def split(examples: list[Example], eval_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """A seeded shuffle into (train, held-out); at least one of each when ``eval_fraction`` > 0."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    if eval_fraction <= 0:
        return shuffled, []
    n_eval = min(len(shuffled) - 1, max(1, round(len(shuffled) * eval_fraction)))
    return shuffled[n_eval:], shuffled[:n_eval]
