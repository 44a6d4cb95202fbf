"""Offline batch jobs: resumable, lossless, as fast as the engine allows.

``tiankong.batch.run(job) -> BatchReport`` streams a JSONL/CSV/folder/OpenAI-batch input through a task
(classify, extract, summarize, tag, redact, rewrite, or a chat template) with a bounded number of items in
flight, appends one line per item to the output and skips ids already there on a re-run, so a crash at any
moment followed by a re-run yields every input exactly once. See docs/batch.md.
"""

from .inputs import Item, detect_format, read_items
from .job import BatchJob, build_job, load_job_file, make_job, read_schema
from .report import BatchReport, BatchStatus, read_report, status
from .runner import ProgressSink, arun, count_input, run
from .store import OutputPaths, repair

__all__ = [
    "BatchJob", "BatchReport", "BatchStatus", "Item", "OutputPaths", "ProgressSink", "arun", "build_job",
    "count_input", "detect_format", "load_job_file", "make_job", "read_items", "read_report", "read_schema",
    "repair", "run", "status",
]
