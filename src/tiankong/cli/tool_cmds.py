"""``call`` and ``sql`` — now made from the task registry like every task command (``cli/task_cmds.py``); this
module keeps their old import path."""

from __future__ import annotations

from .task_cmds import CLI_NAMES as _ALL_NAMES
from .task_cmds import call, sql

COMMANDS = [call, sql]
CLI_NAMES = {name: _ALL_NAMES[name] for name in ("call", "sql")}
