"""The cascade curve as a Markdown table and as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .curve import Curve, Point, random_accuracy


def table_points(curve: Curve, steps: int = 10) -> list[Point]:
    """A readable subset of the curve: at each 1/``steps`` of escalation the last point not above it, the chosen
    point, and both ends (``steps=0``: every point)."""
    if steps <= 0:
        return list(curve.points)
    picked = {id(curve.points[0]), id(curve.points[-1]), id(curve.chosen)}
    for step in range(steps + 1):
        rate = step / steps
        below = [p for p in curve.points if p.escalated <= rate + 1e-12]
        if below:
            picked.add(id(below[-1]))
    return [p for p in curve.points if id(p) in picked]


def markdown_table(curve: Curve, steps: int = 10) -> str:
    """threshold | escalated | cascade accuracy | random at that rate | share of always-large; chosen in bold."""
    lines = ["| threshold | escalated | accuracy | random escalation | of always-large |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for point in table_points(curve, steps):
        chance = random_accuracy(point.escalated, curve.always_small, curve.always_large)
        share = f"{point.accuracy / curve.always_large:.1%}" if curve.always_large else "n/a (large scores 0)"
        cells = [f"{point.threshold:.4f}", f"{point.escalated:.1%}", f"{point.accuracy:.3f}", f"{chance:.3f}",
                 share]
        if point == curve.chosen:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(curve: Curve, small: str, large: str) -> str:
    chosen = curve.chosen
    gains = curve.gains
    above = (f"strictly above random at all {len(gains)} intermediate rates (smallest gain {min(gains):+.3f})"
             if curve.above_random else
             f"NOT strictly above random at every rate ({sum(g <= 1e-12 for g in gains)} of {len(gains)} "
             "intermediate rates at or below)" if gains else "no intermediate rate (all confidences equal)")
    return "\n".join([
        f"always-small ({small}): accuracy {curve.always_small:.3f}",
        f"always-large ({large}): accuracy {curve.always_large:.3f}",
        f"target: {curve.target:.0%} of always-large = accuracy {curve.target_accuracy:.3f}",
        f"chosen: escalate below confidence {chosen.threshold:.4f} -> {chosen.escalated:.1%} escalated, "
        f"accuracy {chosen.accuracy:.3f}",
        f"curve: {above}",
    ])


def plot(curve: Curve, path: str | Path, title: str = "Confidence cascade") -> Path:
    """Accuracy vs escalation rate: the cascade (steps), random escalation, always-small/large, target, chosen."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--plot {out} must end in .png", hint="e.g. --plot cascade.png")
    figure = Figure(figsize=(7, 4.5), dpi=100)
    axes = figure.add_subplot()
    xs = [100 * p.escalated for p in curve.points]
    axes.step(xs, [p.accuracy for p in curve.points], where="post", color="tab:blue", linewidth=2,
              label="cascade (escalate below confidence)")
    axes.plot([0, 100], [curve.always_small, curve.always_large], color="tab:gray", linestyle="--",
              label="random escalation (expected)")
    axes.axhline(curve.always_large, color="tab:green", linewidth=1, label=f"always large {curve.always_large:.3f}")
    axes.axhline(curve.always_small, color="tab:red", linewidth=1, label=f"always small {curve.always_small:.3f}")
    axes.axhline(curve.target_accuracy, color="tab:orange", linestyle=":",
                 label=f"target {curve.target:.0%} of large")
    chosen = curve.chosen
    axes.plot([100 * chosen.escalated], [chosen.accuracy], "o", color="black",
              label=f"chosen: t={chosen.threshold:.3f}, {chosen.escalated:.0%} escalated")
    axes.set_xlim(0, 100)
    axes.set_xlabel("items escalated to the large model (%)")
    axes.set_ylabel("accuracy")
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        figure.savefig(out, format="png")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}", hint="choose a writable --plot path") from None
    return out
