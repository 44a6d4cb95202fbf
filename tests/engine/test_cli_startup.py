"""CLI start-up (issue 45): a verb's ``--help`` and a command that needs no engine import neither scikit-learn/scipy
(deciders load them when one answers) nor jsonschema (its format checkers build an RFC 3987 grammar at import) nor
the engine layer. Structure, not time: the time is measured by ``benchmarks/cli_startup.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sklearn", "scipy", "jsonschema", "rfc3987_syntax", "numpy")

PROBE = """
import json, sys
from tiankong.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)
"""


def modules_after(*argv: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [("classify", "--help"), ("redact", "--help"), ("tag", "--help"),
                                  ("extract", "--help"),
                                  ("call", "--help"), ("eval", "--help"), ("batch", "--help"), ("tune", "--help"),
                                  ("redact", "--no-model", "Call me at 13800138000.")])
def test_no_heavy_import_before_it_is_used(argv: tuple[str, ...]) -> None:
    loaded = modules_after(*argv)
    assert "click" in loaded  # the probe ran the CLI
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_importing_the_cli_and_the_client_stays_light() -> None:
    code = ("import sys, tiankong.cli, tiankong.tasks, tiankong.client._shared, tiankong.deciders; "
            "print(sorted({m.split('.')[0] for m in sys.modules}))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert not [name for name in HEAVY if f"'{name}'" in loaded], loaded
