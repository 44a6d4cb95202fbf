"""Duplicates in a data set: exact (normalised keys), near (MinHash LSH) and semantic (the embedding part's cosine
and a faiss index), the uncertain band decided by a decider, clusters with a kept record and the evidence of every
merge. ``dedupe_records`` / ``dedupe_file`` (library), ``tiankong dedupe`` (CLI), ``DEDUPE`` in the task specs."""

from .band import pair_text
from .core import STAGES, Assignment, Dedupe, DedupeOptions, Evidence, Record, dedupe_flow
from .files import dedupe_file, dedupe_records, read_records, write_atomic
from .keys import KeyOptions

__all__ = ["STAGES", "Assignment", "Dedupe", "DedupeOptions", "Evidence", "KeyOptions", "Record", "dedupe_file",
           "dedupe_flow", "dedupe_records", "pair_text", "read_records", "write_atomic"]
