"""The README's examples run as written (the Python block and the CLI lines)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tiankong.paths import models_dir

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
SKIP = ("models pull",)  # installs a 1.1 GB model: exercised by test_models with SmolLM2 instead


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_python_example_runs() -> None:
    (code,) = blocks("python")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_cli_examples_run(tmp_path: Path) -> None:
    _remove_batch_outputs()
    data = tmp_path / "data"  # `tune` registers a decider: in a registry of its own, the models linked in
    data.mkdir()
    os.symlink(models_dir(), data / "models")
    try:
        _run_cli_examples(data)
    finally:
        _remove_batch_outputs()


def _remove_batch_outputs() -> None:
    for path in ROOT.glob("tickets.labelled.jsonl*"):
        path.unlink()


def _run_cli_examples(data: Path) -> None:
    cli_block = next(block for block in blocks("sh") if block.lstrip().startswith("tiankong"))
    lines = [line.split("  #")[0].strip() for line in cli_block.splitlines() if line.strip()]
    bindir = Path(sys.executable).parent
    ran = 0
    for line in lines:
        if any(skip in line for skip in SKIP):
            continue
        proc = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=600, cwd=ROOT,
                              env={**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                                   "TIANKONG_DATA_DIR": str(data)})
        assert proc.returncode == 0, (line, proc.stderr)
        assert proc.stdout.strip(), line
        ran += 1
    assert ran == 8
