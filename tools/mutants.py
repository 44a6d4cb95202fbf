#!/usr/bin/env python3
"""The mutation check: each guarantee that matters most is removed from a copy of ``src/`` and the tests named
for it must fail. A mutant that survives (its tests still pass) means those tests do not catch what they name.

    python tools/mutants.py            # every mutant (make mutants; make test runs it after pytest)
    python tools/mutants.py --list     # the mutants and their tests
    python tools/mutants.py sql-explain tool-arguments   # only these
    python tools/mutants.py sql-explain --tests tests/engine/test_sql.py -k "not engine"   # does another test catch it?

How: ``src/`` is copied into a temporary folder, once per job (the real tree is never edited); for each mutant one exact
text is replaced there — found by its text anywhere under ``src/`` (so a module that moves keeps its mutant; a text
that is no longer found exactly once fails the check: update the list) — and its tests run with that copy first on
``PYTHONPATH`` (checked: ``tiankong`` is imported from the copy), then the text is restored. The tests are unit tests
(no engine) where possible, so the whole check takes a few minutes on 2 cores. Before the mutants, the same tests
run once on the unmutated copy and must pass (else a "killed" mutant would mean nothing).

Exit status: 0 when every mutant was killed (pytest exit status 1: tests failed — not a collection or import
error, which would hide a broken mutant), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUARANTEES = "tests/unit/test_unit_guarantees.py"
TASKS = "tests/unit/test_unit_tasks.py"
TUNING = "tests/unit/test_unit_tuning.py"
SELECTION = "tests/unit/test_unit_tune_selection.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k expressions


MUTANTS = (
    Mutant("sql-explain", "SQLite's EXPLAIN checks a generated query",
           'db.execute(f"EXPLAIN {sql}")', "pass",
           (GUARANTEES, "tests/engine/test_sql.py::test_queries_are_checked_name_by_name_and_by_explain",
            "-k", "explain or sqlite or sql_returns or checked")),
    Mutant("schema-validation", "a structured answer is validated against its JSON Schema",
           "errors = plan.errors(data)", "errors: list[str] = []",
           (GUARANTEES, TASKS, "-k", "schema or repaired or validates or invalid")),
    Mutant("tool-arguments", "tool-call arguments are valid against the tool's parameters",
           '"properties": {"name": {"const": tool.name}, "arguments": parameters}',
           '"properties": {"name": {"const": tool.name}, "arguments": {"type": "object"}}',
           (TASKS, "-k", "call")),
    Mutant("batch-dedupe", "the batch output takes one result per id (exactly once)",
           "first = self.written.get(key)\n        if first is not None:",
           "first = self.written.get(key)\n        if False:",
           (GUARANTEES, "-k", "one_result_per_id")),
    Mutant("foreign-host", "a keyless gateway answers loopback Host names only (DNS rebinding)",
           "if host and not is_loopback_host(_host_name(host)):", "if False:",
           (GUARANTEES, "-k", "host")),
    Mutant("redaction-fail-safe", "a near-miss ID/card number after its keyword is redacted",
           'yield match.start("value"), match.end("value"), kind, 1.0 if valid or id_shaped else 0.6, valid',
           'if valid:\n                yield match.start("value"), match.end("value"), kind, 1.0, valid',
           (GUARANTEES, "-k", "near_miss")),
    Mutant("fast-forward-counts", "fast-forward counts the forced tokens it did not decode",
           "return max(0, self.answer_tokens - self.decoded)", "return 0",
           (GUARANTEES, "-k", "fast_forward")),
    Mutant("tune-one-se-rule", "tune picks the simplest method within one standard error of the best",
           "close = [r for r in rows if r.accuracy >= best.accuracy - se - 1e-12]", "close = [best]",
           (SELECTION,)),
    Mutant("tune-cv-leak", "cross-validation scores held-out answers only",
           "state = methods.fit(method, features.take(rows), y[rows], n_labels, prior)",
           "state = methods.fit(method, features, y, n_labels, prior)",
           (TUNING, "-k", "held_out")),
    Mutant("tune-ece-weights", "ECE weighs each bin by its share of the answers",
           "total += inside.mean() * abs(", "total += abs(",
           (TUNING, "-k", "ece")),
    Mutant("label-probabilities", "a label's score is read from the engine's token probabilities",
           'top = {int(t["id"]): float(t["prob"]) for t in probs[0].get("top_probs", [])}',
           "top = {}",
           (TASKS, "-k", "classify or choose")),
    Mutant("guard-reader-rules", "an instruction to the reader hidden in a document lifts the guard to flag",
           "score = lifted(score, bool(reader), flag)", "score = score",
           ("tests/unit/test_guard_rules.py",)),
    Mutant("redaction-tagger", "a name the taggers find is redacted when the model path missed it",
           "[*organisations, *reading.names])", "[*organisations])",
           ("tests/engine/test_redact_tagger.py",)),
    Mutant("tune-repeated-cv", "small data are cross-validated over several shuffles and the scores averaged",
           "    if len(runs) == 1:\n        return runs[0]\n", "    if runs:\n        return runs[0]\n",
           (TUNING, "-k", "shuffles")),
    Mutant("dedupe-pair-digits", "probe-pair compares the digits of the numbers both halves hold",
           "    return min(1.0, sum(len(n) for n in a & b) / fewer)\n", "    return 1.0 if a == b else 0.0\n",
           ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-part-per-record", "a mixed corpus is split record by record between the parts",
           "part = record_part(text)\n", "part = record_part(texts[0])\n",
           ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-pair-decider-part", "a pair decider reads its cosine by the part it was tuned with",
           'return None if "part" in decider.state and decider.state["part"] is None else _state_part(decider)',
           'return "all-minilm-l6-v2:f16"', ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-fingerprint-rules", "a finished dedupe job runs again when the semantic stage's rules change",
           "        digest.update(rules().encode())\n", "        pass\n", ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-pair-cosine-mapping", "a pair decider's cosine is its own pair's (0 where its part cannot read)",
           "cosines[i] = max(0.0, _cosine(vectors[2 * j], vectors[2 * j + 1]))",
           "cosines[j] = max(0.0, _cosine(vectors[2 * j], vectors[2 * j + 1]))", ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-part-follows-text", "dedupe's semantic stage and pair deciders read the part that reads the text",
           "return MULTILINGUAL_EMBEDDING_MODEL if CJK_SCRIPT.search(text) else EMBEDDING_MODEL",
           "return EMBEDDING_MODEL", ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("dedupe-part-cosines", "each embedding part merges at its own default cosines",
           "merge, floor = entry.dedupe_cosine if entry is not None else DEDUPE_COSINE",
           "merge, floor = DEDUPE_COSINE", ("tests/unit/test_dedupe_pairs.py",)),
    Mutant("part-prefixes", "an embedding part reads queries and passages after the prefixes it was trained with",
           "return [(q if i < head else p) + (t.rstrip() or t) for i, t in enumerate(texts)]",
           "return list(texts)", ("tests/unit/test_unit_parts.py",)),
    Mutant("packed-model-sha", "a packed model's container is checked by sha256 before it is read",
           "if sha256_file(source) != packed.sha256:", "if False:", ("tests/unit/test_unit_parts.py",)),
    Mutant("rerank-part-weights", "a rerank decider scores a part's cosines with the weights learned on that part",
           'return own if part and own in state else "with_embedding"', 'return "with_embedding"',
           ("tests/unit/test_unit_parts.py",)),
    Mutant("rerank-named-columns", "a rerank weight set reads the feature columns it was fitted with, by name",
           "wanted = names if names is not None else", "wanted = None or", ("tests/unit/test_unit_parts.py",)),
    Mutant("part-for-languages", "text in another language than English gets the multilingual part, not English's",
           'else "en" if english(sample) else "other"', 'else "en"', ("tests/unit/test_unit_parts.py",)),
    Mutant("redact-tagger-veto",
           "a person the model listed that the name taggers read as something else is not redacted",
           "and reading.contradicts(e.start, e.end):", "and False:", ("tests/engine/test_redact_tagger.py",)),
    Mutant("redact-widen", "a tagger's name overlapping a partial person is redacted whole",
           "return merge(widen(text, read_right, reading.names),", "return merge(read_right,",
           ("tests/engine/test_redact_tagger.py",)),
    Mutant("redact-english-veto",
           "an English place, pronoun phrase or common words confirmed as a person is not redacted",
           "elif not (vetoable(text, e, latin=True) and not_a_name(text, e.start, e.end, persons)):", "else:",
           ("tests/engine/test_redact_tagger.py",)),
    Mutant("redact-english-names-kept", "an English name that is also a place or a word is not vetoed",
           'if folded in places and not (all(w in names for w in parts) if len(parts) > 1 else folded in names):',
           "if folded in places:", ("tests/engine/test_redact_tagger.py",)),
    Mutant("redact-surname-candidates", "a lone capitalised surname is asked about as a name",
           'found += [Entity(s, e, "PERSON", text[s:e], "rule", 0.5) for s, e in surname_words(text)',
           'found += [Entity(s, e, "PERSON", text[s:e], "rule", 0.5) for s, e in []',
           ("tests/engine/test_redact_tagger.py",)),
    Mutant("redact-chinese-place", "a Chinese place the model took for a person is not redacted as a person",
           "elif reading.lac and vetoable(text, e) and chinese_place(e.text, SINGLE_SURNAMES) and", "elif False and",
           ("tests/engine/test_redact_tagger.py",)),
)


def locate(src: Path, text: str) -> Path:
    """The one file under ``src`` holding ``text`` exactly once (else SystemExit naming what to update)."""
    found = [(p, p.read_text(encoding="utf-8").count(text)) for p in sorted(src.rglob("*.py"))]
    hits = [(p, n) for p, n in found if n]
    if len(hits) != 1 or hits[0][1] != 1:
        where = ", ".join(f"{p.relative_to(src)} ×{n}" for p, n in hits) or "nowhere"
        raise LookupError(f"the mutated text is found {where} (needs exactly one place): {text!r}")
    return hits[0][0]


def run_tests(copy: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[int, str]:
    """pytest on ``tests`` with the copy first on the path. Lean: no plugin autoload (hypothesis, faker, … cost
    seconds a run) and no conftest (the tests named here need no fixture of the engine tier; ``tests/`` is put
    on the path for ``helpers``), and empty data/cache dirs, so nothing can find a model to start an engine on."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy / "src"), str(ROOT / "tests")]),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "TIANKONG_DATA_DIR": str(copy / "data"), "TIANKONG_CACHE_DIR": str(copy / "cache")}
    env.pop("TIANKONG_URL", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--noconftest",
           "--tb=no", "-rN", *tests]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout_s:.0f} s"
    summary = next((line for line in reversed(proc.stdout.splitlines()) if re.search(r"\d+ (passed|failed)|error",
                                                                                   line)), proc.stdout[-300:])
    return proc.returncode, summary.strip("= ").strip()


def apply_and_test(copy: Path, m: Mutant, timeout_s: float) -> tuple[bool, str]:
    """Apply ``m`` to ``copy``, run its tests, restore the text: (killed, the line to print)."""
    begin = time.monotonic()
    try:
        path = locate(copy / "src", m.old)
    except LookupError as exc:
        return False, f"{m.name:<22} NOT APPLIED  {exc}"
    original = path.read_text(encoding="utf-8")
    path.write_text(original.replace(m.old, m.new), encoding="utf-8")
    try:
        code, summary = run_tests(copy, m.tests, timeout_s)
    finally:
        path.write_text(original, encoding="utf-8")
    killed = code == 1
    return killed, (f"{m.name:<22} {'killed  ' if killed else 'SURVIVED'}  {summary:<40} {path.relative_to(copy)}  "
                    f"({time.monotonic() - begin:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these mutants")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per pytest run")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="mutants tested at once, each on its own copy of src/ (default: 2, or 1 on one CPU)")
    parser.add_argument("--tests", nargs="+", metavar="ARG",
                        help="run these pytest arguments for the chosen mutants instead of their own tests "
                             "(does this other test catch the mutant?)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.tests:
        chosen = [Mutant(m.name, m.guarantee, m.old, m.new, tuple(args.tests)) for m in chosen]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"error: unknown mutant(s) {sorted(unknown)}; see --list", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name:<22} {m.guarantee}\n{'':<22} tests: {' '.join(m.tests)}")
        return 0
    started = time.monotonic()
    jobs = max(1, min(args.jobs, len(chosen)))
    with tempfile.TemporaryDirectory(prefix="tiankong-mutants-") as tmp:
        paths = [Path(tmp) / f"copy{i}" for i in range(jobs)]  # one copy of src/ per job, a mutant in its own
        copies: queue.Queue[Path] = queue.Queue()
        for copy in paths:
            shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            copies.put(copy)
        first = paths[0]
        probe = subprocess.run([sys.executable, "-c", "import tiankong; print(tiankong.__file__)"], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(first / "src")}, capture_output=True, text=True)
        if not probe.stdout.strip().startswith(str(first)):
            print(f"error: the tests would not import the mutated copy (tiankong from {probe.stdout.strip()})",
                  file=sys.stderr)
            return 1
        union = tuple(dict.fromkeys(t for m in chosen for t in m.tests if not t.startswith("-")
                                    and t != "-k" and not _is_k_expr(m, t)))
        code, summary = run_tests(first, union, args.timeout_s)
        print(f"baseline (no mutant): {summary}", flush=True)
        if code != 0:
            print("error: the mutants' tests fail without a mutant; fix them first", file=sys.stderr)
            return 1

        def one(m: Mutant) -> tuple[bool, str]:
            copy = copies.get()
            try:
                return apply_and_test(copy, m, args.timeout_s)
            finally:
                copies.put(copy)

        survivors = []
        with ThreadPoolExecutor(jobs) as pool:  # printed in list order, each line as soon as its turn comes
            for m, (killed, line) in zip(chosen, pool.map(one, chosen), strict=True):
                if not killed:
                    survivors.append(m.name)
                print(line, flush=True)
    total = time.monotonic() - started
    print(f"{len(chosen) - len(survivors)}/{len(chosen)} mutants killed in {total:.0f} s"
          + (f"; not killed: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


def _is_k_expr(mutant: Mutant, arg: str) -> bool:
    """``arg`` is the expression after ``-k`` (not a test path)."""
    tests = list(mutant.tests)
    return any(tests[i] == "-k" and tests[i + 1] == arg for i in range(len(tests) - 1))


if __name__ == "__main__":
    sys.exit(main())
