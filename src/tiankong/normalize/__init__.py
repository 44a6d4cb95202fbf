"""Records normalised to a target schema: deterministic rules first, the model only where no rule resolves, and a
model value kept only when it is derivable from the input (docs/normalize.md)."""

from .base import Resolved
from .core import FieldSpec, Normalized, NormalizeOptions, Normalizer, field_specs, model_schema
from .files import normalize_file, normalize_records, read_rows, read_schema
from .rules import KINDS, RULES

__all__ = ["KINDS", "RULES", "FieldSpec", "NormalizeOptions", "Normalized", "Normalizer", "Resolved", "field_specs",
           "model_schema", "normalize_file", "normalize_records", "read_rows", "read_schema"]
