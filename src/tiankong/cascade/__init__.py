"""Confidence cascade: measure when a small model's decision is enough and when to escalate to a large one.

``build_curve(scores, target)`` (pure, ``curve.py``) turns a score table into the accuracy-vs-escalation curve,
the always-small / always-large / random baselines and the threshold for a target; ``cascade_eval(data, small,
large)`` (``run.py``) fills the table by running both sides (``sides.py``: a model — embedded or remote — or a
tuned decider each; tasks classify, route, guard and extract, ``extract.py`` its field check and confidence);
``report.py`` renders a Markdown table and a PNG; ``write.py`` puts the chosen threshold where route and deciders
read it. See docs/cascade.md.
"""

from .curve import Curve, Point, Score, build_curve, choose, random_accuracy
from .run import Answer, CascadeEval, Record, cascade_eval, load_records, load_routes, score_table
from .write import write_config_threshold, write_decider_threshold, write_threshold

__all__ = ["Answer", "CascadeEval", "Curve", "Point", "Record", "Score", "build_curve", "cascade_eval", "choose",
           "load_records", "load_routes", "random_accuracy", "score_table", "write_config_threshold",
           "write_decider_threshold", "write_threshold"]
