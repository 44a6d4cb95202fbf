"""Drop the sentence texts from raw benchmark rows before they are committed (MSRA and CoNLL-2003 are
research-use corpora: the rows keep ids, gold spans and answers; the texts come back from the package at run time).

    .venv/bin/python benchmarks/strip_texts.py FILE.jsonl [...]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def main() -> None:
    for name in sys.argv[1:]:
        path = Path(name)
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for row in rows:
            if "text" in row and isinstance(row["text"], str):
                row["text_sha256"] = hashlib.sha256(row.pop("text").encode("utf-8")).hexdigest()
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
