"""The exploration that found the guard flagging documentation (issue 40; development data, not a held-out set).

300 sections (1,000–3,000 characters) of the documentation of Django 5.1.4, click 8.1.7 and pytest 8.3.4 (sdists
fetched with pip; none of them in any split of benchmarks/guard_data.py), each wrapped in a user's ask
(``guard_data.ask``), scored the way the guard scores (the text and its windows, the highest; lifted to
``flag_at`` on a reader instruction). Looking at them led to the ``docs`` domain of guard_data.py; they stay
development data.

    .venv/bin/python benchmarks/guard_docs_probe.py [--decider-file OLD.json] --out docs-probe
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import build_guard as B  # noqa: E402
import datasets as D  # noqa: E402
import guard_data as G  # noqa: E402

from tiankong.deciders.registry import BUILTIN_DIR  # noqa: E402

PACKAGES = {"Django==5.1.4": r"docs/.*\.txt$", "click==8.1.7": r"docs/.*\.rst$", "pytest==8.3.4": r"doc/en/.*\.rst$"}


def sections() -> list[tuple[str, str]]:
    found = []
    for requirement, pattern in PACKAGES.items():
        for name, text in G._tar_texts(D._fetch_sdist(requirement), pattern):
            found += [(f"{requirement}:{name}#{k}", text[k:k + 3000])
                      for k in range(0, len(text), 3000) if len(text[k:k + 3000]) > 1000]
    return random.Random(5).sample(found, 300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decider-file", type=Path, default=BUILTIN_DIR / "guard.json")
    parser.add_argument("--out", default="docs-probe")
    args = parser.parse_args()
    artifact = json.loads(args.decider_file.read_text(encoding="utf-8"))
    flag = float(artifact["params"]["flag_at"])
    rng = random.Random(5)
    rows = sections()
    texts = [G.ask({"text": text, "domain": "docs", "lang": "en", "id": name}, rng, "en") for name, text in rows]
    score = B.scores(artifact["state"], texts, flag)
    lines = [f"$ .venv/bin/python benchmarks/guard_docs_probe.py --decider-file {args.decider_file.name} "
             f"--out {args.out}", f"flag_at {flag:.4f}; {len(texts)} asks over Django / click / pytest docs sections",
             f"flagged {(score >= flag).mean():.3f}, median score {np.median(score):.3f}", "highest:"]
    lines += [f"  {s:.3f} {name}" for (name, _), s in sorted(zip(rows, score, strict=True),
                                                              key=lambda x: -x[1])[:10]]
    text = "\n".join(lines)
    print(text)
    (B.RESULTS / f"{args.out}.txt").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
