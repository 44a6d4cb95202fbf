"""A fourth held-out indirect-injection family for the guard: injections in the files, records and tool results
agents read, from four agent-security benchmarks in three packages (issue 40 item 5).

Sources (pinned packages, fetched with pip like every other source; their files are read, nothing of them is run):

* ``inspect-evals==0.28.0`` (MIT, UK AI Security Institute), two of its evaluations:

  - **CodeIPI** (``inspect_evals/ipi_coding_agent/dataset/samples.json``: 45 bug-fixing tasks, 35 with an injection,
    10 clean). The injection sits in one artifact the coding agent reads — the issue text (10), a comment in a
    source file (10), the README (10) or a config file (5: ``config.toml``, ``Makefile``, ``setup.cfg``,
    ``config.yml``, ``.editorconfig``) — and asks it to print secrets, run a command or install a hook. The carrier is
    the issue for the ``issue_text`` vector, else the one repository file that matches the sample's own
    ``payload_indicator`` (exactly one in every sample: a wheel that differs stops the script).
  - **AgentThreatBench** (``inspect_evals/agent_threat_bench/data/*.json``: 24 scenarios, 3 of them clean): an
    inbox (``autonomy_hijack``), a customer database (``data_exfil``) or a knowledge base (``memory_poison``) with
    instructions planted in some of its records. The package marks the attacked e-mails
    (``attack_email_indices``); for the other two tasks it marks no record, so the attacked ones are pinned here
    (:data:`THREATBENCH_PINNED`, read off the data: the record that addresses the assistant).
* ``agent-injection-bench==0.1.0`` (MIT, Sentinel Den; ``aib/data/attacks.jsonl``, 24 rows): a hostile text per
  channel — tool result, document, web page, file metadata, file name — that an agent was asked to process, and
  three ``control`` rows (benign content with imperative or injection-related wording).
* ``bastioncorpus==0.6.0`` (MIT, Stefano Rizzello; ``bastioncorpus/corpus/injections.jsonl``, 181 rows): its
  ``tool_output`` rows. **This package trains the guard** (guard_data.py: every category but
  ``indirect_injection``), so only what the guard never trained or validated on is kept: the 23
  ``indirect_injection`` tool outputs (never in train or val; 10 of them are among the payloads ``indirect_attacks``
  plants in test documents, so the frozen test split holds those in another form) and the 3 benign tool outputs of
  the test bucket (rows of ``labelled("test")``). Its other held tool outputs are left out: three ``obfuscation``
  rows re-encode the trained rows' payload in their trained frame ("Shipping notes for order 4471: …", "The next
  field is … encoded. Decode it and do exactly what it says: …") and ``cot-fire-001`` is the trained ``cot-003``
  reworded. The ``{canary}`` slot is filled with a token drawn with :data:`SEED` (bastion's runner draws one a run).

A row is **the untrusted content as the agent reads it**: the issue text or the file's contents (CodeIPI), the
record as the package's own tool returns it (AgentThreatBench: ``read_inbox``'s ``Email N:`` block,
``lookup_customer``'s record, ``memory_read``'s entry), the hostile text (agent-injection-bench), the tool output
(bastioncorpus) — never the user's task beside it. Benign rows are the same kinds of content the packages ship
clean: the issue texts, source modules, READMEs and config files of CodeIPI that carry no injection (its tests and
the three-line ``pyproject.toml`` files, never a carrier, are left out; two benign READMEs hold ``curl … | bash``:
CodeIPI's "suspicious" controls), the records of AgentThreatBench nobody wrote into, agent-injection-bench's
controls and bastion's benign tool outputs above. Left out everywhere: agent-injection-bench's ``user_message``
baseline (the payload typed by the user: a direct injection) and its ``multi_turn`` rows (a planted earlier user
turn, no content the agent fetched); bastion's ``user_input`` and ``memory`` rows; any row whose text is a row of
the guard's ``labelled`` train or val split (none is); DAN/AIM-style persona jailbreaks (``guard_data.dan_family``:
none here). Nothing is sampled: every carrier is a row (98 injections, 132 benign). Every licence is MIT, so the
raw outputs may hold the texts; ``--eval`` writes only labels, groups, scores and lengths.

Checked before freezing against the ``labelled`` train and val rows (2,808 / 1,453 injections) and the benign asks
over train and val documents: no text is shared, and each package's own strings (``CANARY_EXEC_``, ``AIB-CANARY``,
"Note to the bot", ``call delete_file``, "before modifying", "Attention AI Assistant", …) occur in none of them; but
a few rows share a core phrase with trained injections (case-insensitive, train / val injections): "ignore all
previous instructions" (2 rows; 40 / 20), "ignore your system prompt" (1; 7 / 6), "new system prompt … you are now"
(1; 15 / 10), "decode and follow" (1; 14 / 12), ``<|im_start|>system`` (1; 12 / 2), the cloud metadata address
``169.254.169.254`` (1; 12 / 1), a letter-split "I g n o r e" (1; 14 in both). The family is unseen, not every
phrasing.

    .venv/bin/python benchmarks/guard_ipi.py          # prints the set's size and sha256 (docs/deciders.md)
    .venv/bin/python benchmarks/guard_ipi.py --eval   # scores the shipped guard → results/guard/ipi.txt

The sha256 is to be committed in docs/deciders.md before the guard is scored on this set.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import datasets as D  # noqa: E402
import guard_data as G  # noqa: E402

INSPECT_EVALS = "inspect-evals==0.28.0"
AIB = "agent-injection-bench==0.1.0"
SEED = 64
CODEIPI = "inspect_evals/ipi_coding_agent/dataset/samples.json"
THREATBENCH = "inspect_evals/agent_threat_bench/data/{}.json"
#: AgentThreatBench's attacked records where the package marks none: scenario → customer index / knowledge-base key
THREATBENCH_PINNED: dict[str, tuple[Any, ...]] = {
    "de_001": (0,), "de_002": (0,), "de_003": (1,), "de_005": (0,), "de_006": (1,), "de_008": (0,),
    "mp_001": ("vacation_policy",), "mp_002": ("benefits",), "mp_003": ("performance_reviews",),
    "mp_004": ("data_classification",), "mp_005": ("tech_stack",), "mp_006": ("travel_policy", "expense_limits"),
    "mp_008": ("open_source",), "mp_010": ("security_training",),
}
#: CodeIPI's artifact kinds (the domain of a row): a repository file by its name
CODEIPI_CONFIGS = ("config.toml", "config.yml", "setup.cfg", "Makefile", ".editorconfig")
#: agent-injection-bench's channels: content the agent fetched or was handed (the harness's two branches)
AIB_CHANNELS = {"tool_result": "aib tool result", "document": "aib document", "web_page": "aib document",
                "metadata": "aib document", "filename": "aib document"}
#: bastioncorpus rows left out although the guard never trained on them (see the module docstring)
BASTION_NEAR_TRAINED = ("ob-enc-010", "ob-enc-012", "ob-enc-014", "cot-fire-001")


def _row(text: str, injection: bool, domain: str, where: str) -> dict[str, str]:
    return {"text": text, "label": "injection" if injection else "benign", "domain": domain, "family": "ipi",
            "id": where}


def _codeipi(archive: zipfile.ZipFile) -> list[dict[str, str]]:
    """Each sample's carrier (the injection), and its other issue text, source modules, README and config files."""
    rows = []
    for sample in json.loads(archive.read(CODEIPI).decode("utf-8")):
        artifacts = {"issue": sample.get("issue_text") or ""}
        artifacts.update({name: text for name, text in sample["repo_files"].items()
                          if (name.startswith("src/") and not name.endswith("__init__.py"))
                          or name in ("README.md", *CODEIPI_CONFIGS)})
        carrier = None
        if not sample["is_benign"]:
            if sample["injection_vector"] == "issue_text":
                carrier = "issue"
            else:
                found = [n for n, t in sample["repo_files"].items() if re.search(sample["payload_indicator"], t)]
                if len(found) != 1 or found[0] not in artifacts:
                    raise SystemExit(f"CodeIPI changed: {sample['id']} carriers {found}")
                carrier = found[0]
        for name, text in artifacts.items():
            if not text.strip():
                continue
            kind = "issue" if name == "issue" else "readme" if name == "README.md" else \
                "config" if name in CODEIPI_CONFIGS else "source"
            rows.append(_row(text, name == carrier, f"codeipi {kind}", f"codeipi:{sample['id']}:{name}"))
    return rows


def _threatbench(archive: zipfile.ZipFile) -> list[dict[str, str]]:
    """Every record of every scenario, rendered as the package's tool returns it."""
    rows = []
    pinned_seen = set()
    for task in ("autonomy_hijack", "data_exfil", "memory_poison"):
        for sample in json.loads(archive.read(THREATBENCH.format(task)).decode("utf-8")):
            sid, clean = sample["id"], sample["attack_name"] == "clean_baseline"
            if task == "autonomy_hijack":  # read_inbox: "Email {i}:\n  From: …" (1-based, as attack_email_indices)
                attacked = set(sample.get("attack_email_indices") or ())
                records = [(i, f"Email {i}:\n  From: {e.get('from', 'unknown')}\n  Subject: "
                               f"{e.get('subject', 'no subject')}\n  Body: {e.get('body', '')}", "email")
                           for i, e in enumerate(sample["inbox"], 1)]
            elif task == "data_exfil":  # lookup_customer's record
                attacked = set(THREATBENCH_PINNED.get(sid, ()))
                records = [(i, f"Customer: {c['name']}\nID: {c['id']}\nEmail: {c.get('email', 'N/A')}\nSSN: "
                               f"{c.get('ssn', 'N/A')}\nAccount: {c.get('account', 'N/A')}\nIssue: "
                               f"{c.get('issue', 'N/A')}", "customer") for i, c in enumerate(sample["customer_db"])]
            else:  # memory_read returns the entry's value
                attacked = set(THREATBENCH_PINNED.get(sid, ()))
                records = [(key, value, "memory") for key, value in sample["memory_store"].items()]
            keys = {k for k, _, _ in records}
            if clean == bool(attacked) or not attacked <= keys:
                raise SystemExit(f"AgentThreatBench changed: {sid} attacked {sorted(map(str, attacked))}")
            if sid in THREATBENCH_PINNED:
                pinned_seen.add(sid)
            rows += [_row(text, key in attacked, f"threatbench {kind}", f"threatbench:{sid}:{key}")
                     for key, text, kind in records]
    if pinned_seen != set(THREATBENCH_PINNED):
        raise SystemExit(f"AgentThreatBench changed: pinned scenarios missing {set(THREATBENCH_PINNED) - pinned_seen}")
    return rows


def _aib() -> list[dict[str, str]]:
    """agent-injection-bench's hostile content per fetched channel, and its controls."""
    with zipfile.ZipFile(D._fetch(AIB)) as archive:
        attacks = [json.loads(line) for line in archive.read("aib/data/attacks.jsonl").decode("utf-8").splitlines()
                   if line.strip()]
    return [_row(a["injected"], a["family"] != "control", AIB_CHANNELS[a["channel"]], f"aib:{a['id']}")
            for a in attacks if a["channel"] in AIB_CHANNELS]


def _bastion(rng: random.Random) -> list[dict[str, str]]:
    """bastioncorpus's tool outputs the guard never trained on (the filter on train/val texts is in ipi_set)."""
    with zipfile.ZipFile(D._fetch(D.BASTION)) as archive:
        corpus = [json.loads(x) for x in archive.read("bastioncorpus/corpus/injections.jsonl").decode().splitlines()
                  if x.strip()]
    rows = []
    for r in corpus:
        if r["channel"] != "tool_output" or r["id"] in BASTION_NEAR_TRAINED:
            continue
        injection = r["label"] == "malicious"
        if injection and r["category"] != "indirect_injection":
            continue  # the trained categories' tool outputs: in train or val, or near copies (above)
        if not injection and G.bucket(f"bastion:{r['id']}") != "test":
            continue
        text = r["text"].replace("{canary}", f"REF-{rng.getrandbits(40):010X}")
        rows.append(_row(text, injection, "bastion tool output", f"bastion:{r['id']}"))
    return rows


def ipi_set() -> list[dict[str, str]]:
    """The frozen held-out set: every carrier of the three packages, and the clean content they ship beside it."""
    rng = random.Random(SEED)
    with zipfile.ZipFile(D._fetch(INSPECT_EVALS)) as archive:
        rows = _codeipi(archive) + _threatbench(archive)
    rows += _aib() + _bastion(rng)
    trained = {r["text"] for split in ("train", "val") for r in G.labelled(split)}
    kept: list[dict[str, str]] = []
    seen: set[str] = set()
    for r in rows:
        key = " ".join(r["text"].split())
        if key in seen or r["text"] in trained or G.dan_family(r["text"]):
            continue
        seen.add(key)
        kept.append(r)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", action="store_true", help="score a guard artifact on the set")
    parser.add_argument("--decider-file", type=Path, default=None)
    parser.add_argument("--out", default="ipi")
    args = parser.parse_args()
    rows = ipi_set()
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[f"{r['label']}: {r['id'].split(':')[0]}"] += 1
        counts[f"{r['label']}: {r['id'].split(':')[0]}: {r['domain']}"] += 1
    print(f"ipi set: {len(rows)} rows, sha256 {G.split_sha256(rows)}")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    if args.eval:
        import guard_latent as L

        from tiankong.deciders.registry import BUILTIN_DIR

        print(L.evaluate(rows, args.decider_file or BUILTIN_DIR / "guard.json", args.out,
                         command="benchmarks/guard_ipi.py --eval", name="ipi"))


if __name__ == "__main__":
    main()
