"""The unit tier (a package, so its conftest is ``unit.conftest``, not the top-level ``conftest`` tests import)."""
