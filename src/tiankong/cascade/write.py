"""``tiankong cascade eval --write``: the chosen threshold where route and deciders read it.

* The small side is a model (zero-shot classify or route): ``[route] threshold`` of the config file (``--config``,
  default the file ``tiankong serve`` reads: ``TIANKONG_CONFIG``, else ``config.toml`` in the user config dir).
  The file is edited in place with tomlkit — its comments and every other key kept — and refused when it is not
  a valid tiankong config already; it is created when missing. ``route`` (the library, ``tiankong route``) and the
  gateway (``/v1/tasks/route``, from its config at start-up) use it when a request names no threshold.
* The small side is a tuned decider: its registry entry gets ``params.threshold`` (a new version of the decider,
  the measurement beside it under ``params.threshold_source``; earlier versions are left as they were). ``route``
  with that decider escalates below it and ``classify`` with it abstains below it, unless the caller gives a
  threshold.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from .run import CascadeEval


def evidence(result: CascadeEval, data: str | Path) -> dict[str, Any]:
    """What the threshold was measured on: kept beside it."""
    chosen = result.curve.chosen
    return {"data": str(data), "n": result.curve.n, "task": result.task, "small": result.small,
            "large": result.large, "target": result.curve.target, "escalated": chosen.escalated,
            "accuracy": chosen.accuracy, "always_large": result.curve.always_large,
            "large_decider": result.large_decider,
            "always_small": result.curve.always_small}


def write_threshold(result: CascadeEval, data: str | Path, config: str | Path | None = None) -> str:
    """Write the chosen threshold (a decider's entry, else the config file); returns where, as a sentence."""
    if result.task not in ("classify", "route"):
        raise ConfigError(f"{result.task} has no escalation threshold setting to write (route's and a decider's "
                          "are for classify and route)",
                          hint="leave out --write; read the chosen threshold from the output")
    if result.decider is not None:
        if config is not None:
            raise ConfigError("--config is for a model's threshold; a decider's is written into its entry",
                              hint="leave out --config (route and classify read the decider's threshold)")
        path = write_decider_threshold(result.decider, result.route_threshold, evidence(result, data))
        return f"wrote threshold {result.route_threshold:.6g} into decider {result.decider}'s entry ({path})"
    path = write_config_threshold(result.route_threshold, config)
    return f"wrote [route] threshold = {result.route_threshold:.6g} into {path}"


def check_writable(decider: str | None, config: str | Path | None = None) -> None:
    """Before either side runs: what ``--write`` will write is writable (the config file a valid config, the
    decider a registered one) — found after the run, the error threw the curve away."""
    from .. import paths
    from ..config import load_config

    if decider is not None:
        from ..deciders.registry import load_decider

        if load_decider(decider).source == "file":
            raise ConfigError(f"{decider} is a decider file, not a registered decider: --write has no entry to "
                              "write into", hint="name a registered decider (`tiankong deciders list`)")
        return
    path = Path(config) if config is not None else paths.config_file()
    if path.exists():
        load_config(path)
    paths.check_output(path, "--config")


def write_config_threshold(threshold: float, config: str | Path | None = None) -> Path:
    """Set ``[route] threshold`` in the config file (created when missing), keeping everything else."""
    import tomlkit

    from .. import paths
    from ..config import TiankongConfig, load_config

    _check(threshold)
    path = Path(config) if config is not None else paths.config_file()
    text = ""
    if path.exists():
        load_config(path)  # a file that is not a valid config already is not edited (the error names it)
        text = path.read_text(encoding="utf-8")
    document = tomlkit.parse(text)
    section = document.get("route")
    if section is None:
        section = tomlkit.table()
        document["route"] = section
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: route is not a table", hint="make it [route] (or remove it)")
    section["threshold"] = threshold
    new = tomlkit.dumps(document)
    try:
        written = TiankongConfig.model_validate(tomllib.loads(new)).route.threshold
    except (tomllib.TOMLDecodeError, ValidationError) as exc:  # not expected: said, and nothing written
        raise ConfigError(f"{path}: setting [route] threshold would break the file ({exc})",
                          hint="set it by hand: [route] threshold = VALUE") from None
    if written != threshold:
        raise ConfigError(f"{path}: [route] threshold could not be set (it reads {written})",
                          hint="set it by hand: [route] threshold = VALUE")
    _replace(path, new)
    return path


def write_decider_threshold(ref: str, threshold: float, source: dict[str, Any]) -> Path:
    """Register a new version of decider ``ref`` with ``params.threshold`` (and what it was measured on)."""
    from ..deciders.registry import load_decider, save_decider

    _check(threshold)
    found = load_decider(ref)
    if found.source == "file":
        raise ConfigError(f"{ref} is a decider file, not a registered decider",
                          hint="name a registered decider (`tiankong deciders list`)")
    params = {**found.params, "threshold": threshold, "threshold_source": {"from": found.ref, **source}}
    return save_decider(dataclasses.replace(found, params=params, version=0, created="", source="registry"))


def _check(threshold: float) -> None:
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"threshold {threshold} is outside [0, 1]")


def _replace(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)  # never a half-written config
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}", hint="choose a writable --config path") from None
