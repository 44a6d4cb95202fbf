"""Confidence cascade: measure when a small model's decision is enough and when to escalate to a large one.

``build_curve(scores, target)`` (pure, ``curve.py``) turns a score table into the accuracy-vs-escalation curve,
the always-small / always-large / random baselines and the threshold for a target; ``cascade_eval(data, small,
large)`` (``run.py``) fills the table by running both models; ``report.py`` renders a Markdown table and a PNG.
See docs/cascade.md.
"""

from .curve import Curve, Point, Score, build_curve, choose, random_accuracy
from .run import Answer, CascadeEval, Record, cascade_eval, load_records, score_table

__all__ = ["Answer", "CascadeEval", "Curve", "Point", "Record", "Score", "build_curve", "cascade_eval", "choose",
           "load_records", "random_accuracy", "score_table"]
