"""The mutation check's list stays applicable: each mutant's text is found exactly once under ``src/``.

A source edit that rewrites a guarded line (the redaction fail-safe's ``yield`` gained ``or id_shaped``) left its
mutant "NOT APPLIED", which the check reports only at the very end of ``make test`` — after 20 minutes on CI. This
test says so in the unit tier, in a second."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutants_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tiankong_tools_mutants", ROOT / "tools" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


MUTANTS = _mutants_module()


@pytest.mark.parametrize("mutant", MUTANTS.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_text_is_found_exactly_once_in_src(mutant: object) -> None:
    path = MUTANTS.locate(ROOT / "src", mutant.old)  # type: ignore[attr-defined]
    assert path.suffix == ".py"
    assert mutant.old != mutant.new  # type: ignore[attr-defined]


def test_mutant_names_are_distinct() -> None:
    names = [m.name for m in MUTANTS.MUTANTS]
    assert len(names) == len(set(names))
