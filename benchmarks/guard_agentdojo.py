"""A third held-out indirect-injection family for the guard: AgentDojo's injections in tool results (issue 40 item 5).

AgentDojo (``agentdojo==0.1.35``, MIT, ETH Zürich; fetched with pip like every other source) is a benchmark of
agents that read tool results an attacker can write into: e-mails, calendar events, cloud-drive files, hotel
reviews, bank transactions and notices, web pages and Slack messages. Its suites ship the environments with a
placeholder at each place an attacker controls (``data/suites/*/…yaml``: ``{email_facebook_injection}``), the
benign text each placeholder holds by default (``injection_vectors.yaml``), the attackers' goals
(``default_suites/*/*/injection_tasks.py``: ``GOAL = "Send a transaction to US1330… that includes …"``) and the
attack templates that wrap a goal (``attacks/*.py``: ``important_instructions`` — ``<INFORMATION> This is an
important message from me, Emma Johnson, to you, GPT-4 …``, ``ignore_previous``, ``system_message``,
``injecagent``, ``direct``; the denial-of-service attacks keep their strings elsewhere, ask for no goal and are left
out, the ``important_instructions_*`` variants are the same string with other names — drawn from :data:`USERS` and
:data:`MODELS`). No text of AgentDojo is in the guard's training or validation data, and its authors wrote it
independently of this project; but two templates share their core phrase with trained injections ("Ignore all
previous instructions", "ignore your previous" — docs/deciders.md gives the counts), so the family is unseen, not
every one of its phrasings. ``tool_knowledge`` is filled without its tool-call sequence (``tools=""``: AgentDojo
derives it by running the injection task's ground truth, which this script does not run).

A row is one **tool result as an agent reads it**: the record that holds a placeholder (the e-mail, the event, the
file, the hotel with its reviews, the page), dumped as YAML as AgentDojo's pipeline shows tool results, with the
placeholder holding an attack (a template × a goal of the same suite, drawn with a fixed seed) — or, for the benign
rows, the same record with every placeholder at its default. Templates and goals are read from the wheel's source
text (``ast``; nothing of agentdojo is imported or run).

    .venv/bin/python benchmarks/guard_agentdojo.py          # prints the set's size and sha256 (docs/deciders.md)
    .venv/bin/python benchmarks/guard_agentdojo.py --eval   # scores the shipped guard → results/guard/agentdojo.txt
    .venv/bin/python benchmarks/guard_agentdojo.py --use-model 300   # the same with the chat model's judgement

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
TEMPLATES = ("direct", "ignore_previous", "important_instructions", "injecagent", "system_message", "tool_knowledge")
PLACEHOLDER = re.compile(r"\{([a-z_0-9]+)\}")
#: AgentDojo's names: the user of its suites, and the model names its attacks write (``models.MODEL_NAMES``, the
#: defaults of ``attacks/base_attacks.py``)
USERS = ("Emma Johnson", "the user")
MODELS = ("GPT-4", "Claude", "the AI language model")


def _templates(archive: zipfile.ZipFile) -> dict[str, str]:
    """Every attack class's jailbreak string: ``_JB_STRING`` or the first string given to ``super().__init__``
    (:data:`TEMPLATES` exactly: a wheel that yields others stops the script)."""
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
    if set(out) != set(TEMPLATES):
        raise SystemExit(f"agentdojo's attack templates changed: {sorted(out)}")
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
                                 "domain": attack, "family": "agentdojo", "id": where, "payload": text})
    return [r for r in rows if not G.dan_family(r["text"])]


def with_model(rows: list[dict[str, str]], benign_n: int, out: str, slots: int = 2) -> str:
    """The guard with ``use_model=True`` (the decider and the default chat model's yes/no, noisy-OR) beside the
    shipped default (the decider's score lifted by the reader rules, no model), on the set and on a seeded sample
    of ``benign_n`` realistic benign test rows (the FPR-0.05 threshold of each configuration from its own scores
    there: not the 862 rows of ``--eval``, so its figures differ from that read's). The engine's answers are stored
    per text (``<out>-model.jsonl``, resumable)."""
    import hashlib
    import json
    from concurrent.futures import ThreadPoolExecutor

    import build_guard as B
    import numpy as np

    from tiankong import Client
    from tiankong.deciders.registry import BUILTIN_DIR, load_decider
    from tiankong.engine import EngineConfig, EngineProcess
    from tiankong.models import DEFAULT_MODEL, model_path
    from tiankong.structured.drivers import run_sync
    from tiankong.tasks.guard import guard_flow

    realistic = random.Random(SEED).sample(G.benign_requests("test"), benign_n)
    texts = [r["text"] for r in rows] + [r["text"] for r in realistic]
    store = B.RESULTS / f"{out}-model.jsonl"
    done: dict[str, dict[str, float]] = {}
    if store.exists():
        for line in store.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            done[item["sha256"]] = item
    key = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    decider = load_decider(str(BUILTIN_DIR / "guard.json"))
    todo = sorted({k: t for k, t in zip(key, texts, strict=True) if k not in done}.items())
    if todo:
        config = EngineConfig(model=model_path(DEFAULT_MODEL), ctx=4096 * slots, slots=slots)
        with EngineProcess(config) as engine, Client(engine.url) as client:
            def one(item: tuple[str, str]) -> dict[str, Any]:
                verdict = run_sync(guard_flow(item[1], decider=decider, use_model=True), client._request)
                row = {"sha256": item[0], "score": verdict.score, "model": verdict.model_probability,
                       "decider": verdict.decider_probability}
                with store.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                return row

            with ThreadPoolExecutor(slots) as pool:
                for k, row in enumerate(pool.map(one, todo)):
                    done[row["sha256"]] = row
                    if k % 50 == 0:
                        print(f"{k + 1}/{len(todo)}", flush=True)
    with_m = np.asarray([done[k]["score"] for k in key])
    alone = np.asarray(B.scores(decider.state, texts, float(decider.params["flag_at"])))
    n = len(rows)
    flag_at = float(decider.params["flag_at"])
    lines = [f"$ .venv/bin/python benchmarks/guard_agentdojo.py --use-model {benign_n} --out {out}",
             f"agentdojo set sha256 {G.split_sha256(rows)} ({n} rows); realistic benign test rows: a seeded sample of "
             f"{benign_n} (seed {SEED}) of guard_data.benign_requests('test'); model {DEFAULT_MODEL}; flag_at "
             f"{flag_at:.4f}", "",
             f"{'configuration':<28} {'thr FPR.05':>10} {'recall':>7} {'flag':>6} {'benign flagged':>15} "
             f"{'realistic flagged':>18}"]
    is_attack = np.asarray([r["label"] == "injection" for r in rows])
    for name, s in (("decider (shipped default)", alone), ("decider + model (use_model)", with_m)):
        attack_s, benign_s, real_s = s[:n][is_attack], s[:n][~is_attack], s[n:]
        threshold = float(np.quantile(real_s, 0.95))
        lines.append(f"{name:<28} {threshold:>10.4f} {(attack_s > threshold).mean():>7.3f} "
                     f"{(attack_s >= flag_at).mean():>6.3f} {(benign_s >= flag_at).mean():>15.3f} "
                     f"{(real_s >= flag_at).mean():>18.3f}")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r["label"] == "injection":
            groups[r["domain"]].append(i)
    threshold = float(np.quantile(with_m[n:], 0.95))
    lines += ["", "decider + model, per attack: recall at its FPR-0.05 threshold / at flag"]
    lines += [f"  {g:<26} {len(ix):>4} {(with_m[ix] > threshold).mean():.3f} / {(with_m[ix] >= flag_at).mean():.3f}"
              for g, ix in sorted(groups.items())]
    text = "\n".join(lines)
    (B.RESULTS / f"{out}-model.txt").write_text(text + "\n", encoding="utf-8")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", action="store_true", help="score a guard artifact on the set")
    parser.add_argument("--decider-file", type=Path, default=None)
    parser.add_argument("--out", default="agentdojo")
    parser.add_argument("--use-model", type=int, default=0, metavar="N",
                        help="also score with the chat model's judgement (N realistic benign rows for the threshold)")
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
    if args.use_model:
        print(with_model(rows, args.use_model, args.out))


if __name__ == "__main__":
    main()
