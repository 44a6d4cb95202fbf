"""A third held-out indirect-injection family for the guard: AgentDojo's injections in tool results (issue 40 item 5).

AgentDojo (``agentdojo==0.1.35``, MIT, ETH Zürich; fetched with pip like every other source) is a benchmark of
agents that read tool results an attacker can write into: e-mails, calendar events, cloud-drive files, hotel
reviews, bank transactions and notices, web pages and Slack messages. Its suites ship the environments with a
placeholder at each place an attacker controls (``data/suites/*/…yaml``: ``{email_facebook_injection}``), the
benign text each placeholder holds by default (``injection_vectors.yaml``), the attackers' goals
(``default_suites/*/*/injection_tasks.py``: ``GOAL = "Send a transaction to US1330… that includes …"``) and the
attack templates that wrap a goal (``attacks/*.py``: ``important_instructions`` — ``<INFORMATION> This is an
important message from me, Emma Johnson, to you, GPT-4 …``, ``ignore_previous``, ``system_message``,
``injecagent``, ``direct``, and the denial-of-service ones). None of those strings is in the guard's training or
validation data (checked: none of the templates' phrases occurs there), and its authors wrote them independently of
this project, so the family is absent from training.

A row is one **tool result as an agent reads it**: the record that holds a placeholder (the e-mail, the event, the
file, the hotel with its reviews, the page), dumped as YAML as AgentDojo's pipeline shows tool results, with the
placeholder holding an attack (a template × a goal of the same suite, drawn with a fixed seed) — or, for the benign
rows, the same record with every placeholder at its default. Templates and goals are read from the wheel's source
text (``ast``; nothing of agentdojo is imported or run).

    .venv/bin/python benchmarks/guard_agentdojo.py          # prints the set's size and sha256 (docs/deciders.md)
    .venv/bin/python benchmarks/guard_agentdojo.py --eval   # scores the shipped guard → results/guard/agentdojo.txt

The sha256 was committed in docs/deciders.md before the guard was scored on this set.
"""

from __future__ import annotations

import argparse
import ast
import random
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))
import datasets as D  # noqa: E402
import guard_data as G  # noqa: E402

AGENTDOJO = "agentdojo==0.1.35"
PER_RECORD = 10
SEED = 52
SUITES = {"workspace": ("include/inbox.yaml", "include/calendar.yaml", "include/cloud_drive.yaml"),
          "travel": ("environment.yaml",), "banking": ("environment.yaml",), "slack": ("environment.yaml",)}
PLACEHOLDER = re.compile(r"\{([a-z_0-9]+)\}")
#: AgentDojo's names: the user of its suites, and the model names its attacks write (``models.MODEL_NAMES``, the
#: defaults of ``attacks/base_attacks.py``)
USERS = ("Emma Johnson", "the user")
MODELS = ("GPT-4", "Claude", "the AI language model")


def _templates(archive: zipfile.ZipFile) -> dict[str, str]:
    """Every attack class's jailbreak string: ``_JB_STRING`` or the first string given to ``super().__init__``."""
    out: dict[str, str] = {}
    for name in archive.namelist():
        if not (name.startswith("agentdojo/attacks/") and name.endswith(".py")):
            continue
        tree = ast.parse(archive.read(name).decode("utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            attack = next((ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                           and any(isinstance(t, ast.Name) and t.id == "name" for t in s.targets)), None)
            text = next((ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == "_JB_STRING" for t in s.targets)), None)
            if text is None:
                calls = [c for c in ast.walk(cls) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                         and c.func.attr == "__init__" and c.args and isinstance(c.args[0], ast.Constant)]
                text = calls[0].args[0].value if calls else None  # type: ignore[attr-defined]
            if attack and isinstance(text, str):
                out[attack] = text
    return out


def _goals(archive: zipfile.ZipFile) -> dict[str, list[str]]:
    """Each suite's injection goals over every version of the suites (f-strings resolved from class constants)."""
    goals: dict[str, set[str]] = defaultdict(set)
    for name in archive.namelist():
        match = re.match(r"agentdojo/default_suites/[^/]+/([a-z]+)/injection_tasks\.py$", name)
        if not match:
            continue
        tree = ast.parse(archive.read(name).decode("utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            consts: dict[str, str] = {}
            for stmt in cls.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
                    stmt.targets[0] if isinstance(stmt, ast.Assign) else None
                if not isinstance(target, ast.Name) or stmt.value is None:  # type: ignore[union-attr]
                    continue
                value = stmt.value  # type: ignore[union-attr]
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    consts[target.id] = value.value
                elif isinstance(value, ast.JoinedStr):
                    parts = []
                    for piece in value.values:
                        if isinstance(piece, ast.Constant):
                            parts.append(str(piece.value))
                        elif isinstance(piece, ast.FormattedValue) and isinstance(piece.value, ast.Name) \
                                and piece.value.id in consts:
                            parts.append(consts[piece.value.id])
                        else:
                            parts = []
                            break
                    if parts:
                        consts[target.id] = "".join(parts)
            if "GOAL" in consts:
                goals[match.group(1)].add(consts["GOAL"])
    return {suite: sorted(found) for suite, found in goals.items()}


def _records(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, record) of every record holding a placeholder: the nearest mapping that is an item of a list, else the
    one ``{key: value}`` pair (a web page, a file of the banking suite); a placeholder in a list of names is no
    record (a Slack channel's name)."""
    found: list[tuple[tuple[Any, ...], Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and PLACEHOLDER.search(value):
                found.append((path + (key,), {key: value}))
            else:
                found += _records(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict) and PLACEHOLDER.search(yaml.safe_dump(item)):
                found.append((path + (i,), item))
            elif not isinstance(item, str):
                found += _records(item, path + (i,))
    return found


def _fill(record: Any, values: dict[str, str]) -> Any:
    if isinstance(record, dict):
        return {k: _fill(v, values) for k, v in record.items()}
    if isinstance(record, list):
        return [_fill(v, values) for v in record]
    if isinstance(record, str):
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), record)
    return record


def _dump(record: Any) -> str:
    return yaml.safe_dump(record, sort_keys=False, allow_unicode=True, width=100).strip()


def agentdojo_set() -> list[dict[str, str]]:
    """The frozen held-out set: PER_RECORD attacks per record that holds a placeholder, and each record benign."""
    archive = zipfile.ZipFile(D._fetch(AGENTDOJO))
    templates, goals = _templates(archive), _goals(archive)
    rng = random.Random(SEED)
    rows: list[dict[str, str]] = []
    for suite, files in SUITES.items():
        base = f"agentdojo/data/suites/{suite}/"
        vectors = yaml.safe_load(archive.read(base + "injection_vectors.yaml").decode("utf-8"))
        defaults = {name: str(v.get("default", "")) for name, v in vectors.items()}
        for file in files:
            tree = yaml.safe_load(archive.read(base + file).decode("utf-8"))
            for path, record in _records(tree):
                names = [n for n in PLACEHOLDER.findall(_dump(record)) if n in defaults]
                if not names:
                    continue
                where = f"{suite}:{file.rsplit('/', 1)[-1]}:{'/'.join(map(str, path))}"
                rows.append({"text": _dump(_fill(record, defaults)), "label": "benign", "domain": f"{suite} record",
                             "family": "agentdojo", "id": where})
                for _ in range(PER_RECORD):
                    attack = rng.choice(sorted(templates))
                    text = templates[attack].format(goal=rng.choice(goals[suite]), user=rng.choice(USERS),
                                                    model=rng.choice(MODELS), task="the task", tools="")
                    target = rng.choice(names)
                    rows.append({"text": _dump(_fill(record, {**defaults, target: text})), "label": "injection",
                                 "domain": attack, "family": "agentdojo", "id": where})
    return [r for r in rows if not G.dan_family(r["text"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", action="store_true", help="score a guard artifact on the set")
    parser.add_argument("--decider-file", type=Path, default=None)
    parser.add_argument("--out", default="agentdojo")
    args = parser.parse_args()
    rows = agentdojo_set()
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[f"{r['label']}: {r['id'].split(':')[0]}"] += 1
        if r["label"] == "injection":
            counts[f"{r['label']}: {r['domain']}"] += 1
    print(f"agentdojo set: {len(rows)} rows, sha256 {G.split_sha256(rows)}")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    if args.eval:
        import guard_latent as L

        from tiankong.deciders.registry import BUILTIN_DIR

        print(L.evaluate(rows, args.decider_file or BUILTIN_DIR / "guard.json", args.out,
                         command="benchmarks/guard_agentdojo.py --eval", name="agentdojo"))


if __name__ == "__main__":
    main()
