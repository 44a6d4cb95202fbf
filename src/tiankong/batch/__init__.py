"""Offline batch jobs: resumable, lossless, as fast as the engine allows.

``tiankong.batch.run(job) -> BatchReport`` streams a JSONL/CSV/folder/OpenAI-batch input through a task
(classify, extract, summarize, tag, redact, rewrite, or a chat template) with a bounded number of items in
flight, appends one line per item to the output and skips ids already there on a re-run, so a crash at any
moment followed by a re-run yields every input exactly once. See docs/batch.md.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .inputs import Item, detect_format, read_items
    from .job import BatchJob, build_job, load_job_file, make_job, read_schema
    from .report import BatchReport, BatchStatus, read_report, status
    from .runner import ProgressSink, arun, count_input, run
    from .store import OutputPaths, repair

#: names served from their modules on first use: ``tiankong batch --help`` and ``batch.job`` need no runner (and
#: no HTTP client)
_LAZY = {
    "Item": "inputs", "detect_format": "inputs", "read_items": "inputs", "BatchJob": "job", "build_job": "job",
    "load_job_file": "job", "make_job": "job", "read_schema": "job", "BatchReport": "report",
    "BatchStatus": "report", "read_report": "report", "status": "report", "ProgressSink": "runner",
    "arun": "runner", "count_input": "runner", "run": "runner", "OutputPaths": "store", "repair": "store",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "BatchJob", "BatchReport", "BatchStatus", "Item", "OutputPaths", "ProgressSink", "arun", "build_job",
    "count_input", "detect_format", "load_job_file", "make_job", "read_items", "read_report", "read_schema",
    "repair", "run", "status",
]
