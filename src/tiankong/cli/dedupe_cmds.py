"""``tiankong dedupe``: exact, near and semantic duplicates of a JSONL/CSV file (``tiankong.dedupe.dedupe_file``)."""

from __future__ import annotations

from typing import cast

import click

from ..dedupe.core import DEFAULTS as _D  # the library's defaults are the options' (light: no numpy, no faiss)
from ..dedupe.parts import cosines_said
from . import emit_json


@click.command()
@click.option("--input", "input_path", required=True, help="JSONL (one object per line) or .csv with a header.")
@click.option("--output", required=True, help="One {id, cluster, kept, evidence} line per input record "
              "(written at once: temp file + rename).")
@click.option("--field", default="text", show_default=True, help="The record field holding the text compared.")
@click.option("--id-field", default="id", show_default=True, help="The record field holding the (unique) id.")
@click.option("--near", type=float, default=_D.near, show_default=True,
              help="MinHash Jaccard estimate at which two texts are near duplicates.")
@click.option("--near-low", type=float, default=_D.near_low,
              help="Near pairs in [near-low, near) are uncertain (default: no near band).")
@click.option("--shingle", type=int, default=_D.shingle,
              help="Characters per MinHash shingle (default: 3 for mostly-CJK text, else 5).")
@click.option("--semantic", type=float, default=_D.semantic,
              help="Cosine of the embedding part's sentence vectors at which two texts are duplicates (default: "
              f"the part's own; merge / band floor: {cosines_said()}).")
@click.option("--semantic-low", type=float, default=_D.semantic_low,
              help="Semantic pairs in [semantic-low, semantic) are uncertain (default: the part's floor; equal to "
              "the merging cosine: no band).")
@click.option("--stages", default=",".join(_D.stages), show_default=True,
              help="Stages to run, comma-separated: exact, near, semantic.")
@click.option("--keep", default=_D.keep, show_default=True,
              help="The record kept per cluster: first, longest, most-complete or field:NAME (largest NAME).")
@click.option("--decider", default=None, help="Decides the uncertain pairs (labels same/different; "
              "`tiankong deciders list`); without it they stay apart and are reported.")
@click.option("--part", default="", help="The embedding part of every record (default: per record, "
              "all-minilm-l6-v2:f16 for English and Latin letters, multilingual-e5-small:q4_0 for Chinese).")
@click.option("--keep-ids", is_flag=True, help="Write only the kept ids, one per line.")
@click.option("--pairs-out", default=None, help="Also write the uncertain pairs to this JSONL file, one "
              '{a, b, a_id, b_id, stage, score, label: ""} per pair: fill in label (same/different) and learn a '
              "decider from them with `tiankong tune dedupe --data FILE`.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def dedupe(input_path: str, output: str, field: str, id_field: str, near: float, near_low: float | None,
           shingle: int | None, semantic: float | None, semantic_low: float | None, stages: str, keep: str,
           decider: str | None, part: str, keep_ids: bool, pairs_out: str | None, as_json: bool) -> None:
    """Find exact, near and semantic duplicates in --input; write clusters (or the kept ids) to --output."""
    from ..dedupe import DedupeOptions, dedupe_file
    from ..dedupe.core import Stage

    chosen = tuple(cast(Stage, s.strip()) for s in stages.split(",") if s.strip())
    options = DedupeOptions(near=near, near_low=near_low, semantic=semantic, semantic_low=semantic_low,
                            shingle=shingle, keep=keep, stages=chosen, decider=decider, part=part)
    report = dedupe_file(input_path, output, field=field, id_field=id_field, options=options, keep_ids=keep_ids,
                         pairs_out=pairs_out)
    if as_json:
        emit_json(report)
        return
    click.echo(f"{report['records']} records → {report['clusters']} clusters ({report['duplicates']} duplicates); "
               f"{'kept ids' if keep_ids else 'clusters'} in {output}")
    for stage, stats in report["stages"].items():
        click.echo(f"  {stage}: {_line(stats)}")
        parts = stats.get("parts", {})
        if "skipped" not in stats or len(parts) > 1:  # one skipped part: its reason is the stage's line already
            for part, own in parts.items():
                click.echo(f"    {part}: {_line(own)}")
    uncertain = report["uncertain"]
    if uncertain.get("pairs"):
        joined = uncertain.get("already_joined", 0)
        click.echo(f"  uncertain: {uncertain['pairs']} pairs" + (
            f", decided by {uncertain['decider']}: {uncertain['decided_same']} same, "
            f"{uncertain['decided_different']} different" if "decider" in uncertain else
            f", {uncertain['left']} left apart (give --decider NAME to decide them)") +
            (f", {joined} already in one cluster" if joined else ""))
    if pairs_out is not None:
        click.echo(f"  {report['pairs_written']} uncertain pairs in {pairs_out}: label them same/different, then "
                   f"`tiankong tune dedupe --data {pairs_out} --name NAME` and `--decider NAME`")
    for note in report["notes"]:
        click.echo(f"  note: {note}")


def _line(stats: dict[str, object]) -> str:
    """``key value, …`` of a stage's (or a part's) figures; a band of None reads "none"."""
    return ", ".join(f"{k} {'none' if v is None else v}" for k, v in stats.items()
                     if k != "parts" and (v is not None or k == "band"))
