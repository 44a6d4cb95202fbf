"""Eval harness: fixed eval sets, model/quantization A/B at temperature 0 through the batch worker.

``load_set(path)`` validates a JSONL/YAML set; ``run_eval(set, models, out_dir=…)`` runs every item on every
model (cached by model sha256, parameters and item); ``compare_runs(runs)`` classifies per-item differences and
applies the decision rule; ``to_markdown`` / ``to_html`` render the comparison. See docs/evals.md.
"""

from .compare import Comparison, classify_item, compare_runs, paired_bootstrap
from .format import SCORERS, EvalItem, EvalSet, load_set
from .init import write_starter
from .report import to_html, to_markdown
from .results import EvalRun, ItemResult, read_run, read_runs
from .run import EvalParams, run_eval
from .scorers import score, token_f1

__all__ = [
    "SCORERS", "Comparison", "EvalItem", "EvalParams", "EvalRun", "EvalSet", "ItemResult", "classify_item",
    "compare_runs", "load_set", "paired_bootstrap", "read_run", "read_runs", "run_eval", "score", "to_html",
    "to_markdown", "token_f1", "write_starter",
]
