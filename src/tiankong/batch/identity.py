"""What makes two runs of ``batch run`` one job, and ``OUT.job.json``: the job as run, with full paths and a
fingerprint of its input (a moved input is recognised by it)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .job import BatchJob

__all__ = ["INPUT_HEAD", "JOB_IDENTITY", "REDACT_KEY", "input_head", "redact_key_id", "stored_job"]


def stored_job(job: BatchJob, fmt: str) -> dict[str, Any]:
    """``OUT.job.json``: the job as run, its input and output as full paths (``batch status`` finds the input from
    any directory, and ``--job OUT.job.json`` runs the same job again from anywhere)."""
    stored = {**job.model_dump(mode="json", by_alias=True), "format": fmt,
              "input": str(Path(job.input).resolve()), "output": str(Path(job.output).resolve()),
              INPUT_HEAD: input_head(job.input)}
    if (key_id := redact_key_id(job)) is not None:
        stored[REDACT_KEY] = key_id
    return stored


#: ``OUT.job.json``'s fingerprint of the input's first bytes (not a job key: ``load_job_file`` drops it)
INPUT_HEAD = "input_head"
#: ``OUT.job.json``'s fingerprint of the key a hash-style redaction without a salt tags with (this installation's
#: ``redact-key``): run on another machine, or after the key was replaced, the same value gets another tag — the
#: resumed run says so (``ANSWER_KEYS``). Not a job key either.
REDACT_KEY = "redact_key"


def redact_key_id(job: BatchJob) -> str | None:
    """The fingerprint of the installation key ``job`` tags with (None unless it is hash-style redaction with no
    salt: a salt is in the job's own ``args``)."""
    if job.task != "redact" or job.args.get("style") != "hash" or job.args.get("salt"):
        return None
    from ..tasks.redact import installation_key_id

    return installation_key_id()


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
ANSWER_KEYS = ("text_field", "args", "template", "system", "max_tokens", "model", REDACT_KEY)


def changed_settings(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The answer-shaping settings (``ANSWER_KEYS``) ``now`` gives otherwise than the stored job ``before``."""
    return [key for key in ANSWER_KEYS if key in before and before.get(key) != now.get(key)]
