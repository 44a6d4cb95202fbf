"""What makes two runs of ``batch run`` one job, and ``OUT.job.json``: the job as run, with full paths and a
fingerprint of its input (a moved input is recognised by it)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .job import BatchJob

__all__ = ["INPUT_HEAD", "JOB_IDENTITY", "input_head", "stored_job"]


def stored_job(job: BatchJob, fmt: str) -> dict[str, Any]:
    """``OUT.job.json``: the job as run, its input and output as full paths (``batch status`` finds the input from
    any directory, and ``--job OUT.job.json`` runs the same job again from anywhere)."""
    return {**job.model_dump(mode="json", by_alias=True), "format": fmt,
            "input": str(Path(job.input).resolve()), "output": str(Path(job.output).resolve()),
            INPUT_HEAD: input_head(job.input)}


#: ``OUT.job.json``'s fingerprint of the input's first bytes (not a job key: ``load_job_file`` drops it)
INPUT_HEAD = "input_head"


def input_head(path: str | Path, size: int = 1 << 16) -> str | None:
    """sha256 of the input file's first 64 KiB (None for a folder or an unreadable file): a moved input is
    recognised by it, where its path no longer is."""
    try:
        with Path(path).open("rb") as handle:
            return hashlib.sha256(handle.read(size)).hexdigest()
    except OSError:
        return None


#: what makes two runs one job: the input, how its ids are read, and the task. The rest may change between runs —
#: engines, concurrency, ordering, and what fixes the failed records (the text field, template, arguments, budget:
#: the documented "fix the job, then --retry-failed")
JOB_IDENTITY = ("input", "format", "id_field", "kind", "task")


#: what shapes an answer without making another job: a run that changes one of them answers only the lines not done
ANSWER_KEYS = ("text_field", "args", "template", "system", "max_tokens", "model")


def changed_settings(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The answer-shaping settings (``ANSWER_KEYS``) ``now`` gives otherwise than the stored job ``before``."""
    return [key for key in ANSWER_KEYS if key in before and before.get(key) != now.get(key)]
