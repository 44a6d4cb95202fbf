"""``tiankong lora list|add|train|rm``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from .. import lora as L
from . import emit_json


@click.group()
def lora() -> None:
    """LoRA adapters: registry, training, per-request selection (docs/lora.md)."""


def _show(record: L.AdapterRecord, as_json: bool, verb: str) -> None:
    if as_json:
        emit_json(record.to_json())
    else:
        click.echo(f"{verb} {record.name} (base {record.base}, rank {record.rank}, {_size(record.bytes)}) "
                   f"{record.path}")


@lora.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_cmd(as_json: bool) -> None:
    """Registered adapters."""
    records = L.list_adapters()
    for name in L.broken_adapters():
        click.echo(f"warning: {name} is broken (its manifest or adapter file is damaged or missing): remove it with "
                   f"`tiankong lora rm {name}`, then add it again", err=True)
    if as_json:
        emit_json([record.to_json() for record in records])
        return
    if not records:
        click.echo("no adapters registered (tiankong lora add FILE --name N --base MODEL, or tiankong lora train)")
        return
    table = Table("name", "base", "rank", "alpha", "targets", "size")
    for r in records:
        table.add_row(r.name, r.base, str(r.rank), f"{r.alpha:g}" if r.alpha is not None else "-",
                      ",".join(r.targets), _size(r.bytes))
    Console().print(table)


@lora.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="Name requests use to pick the adapter.")
@click.option("--base", required=True, help="Installed model the adapter was trained on (checked).")
@click.option("--force", is_flag=True, help="Replace an adapter registered under the same name.")
@click.option("--json", "as_json", is_flag=True)
def add(file: str, name: str, base: str, force: bool, as_json: bool) -> None:
    """Register a GGUF LoRA file after checking it against the base model."""
    _show(L.add_adapter(file, name=name, base=base, force=force), as_json, "added")


@lora.command()
@click.option("--base", required=True, help="Installed model to fine-tune (llama/qwen2/gemma3 architectures).")
@click.option("--data", "data", required=True, type=click.Path(dir_okay=False, exists=True),
              help="JSONL of {prompt, answer} or {messages: [...]} records.")
@click.option("--name", required=True, help="Name to register the adapter under.")
@click.option("--r", "rank", default=8, show_default=True, type=click.IntRange(1, 256), help="LoRA rank.")
@click.option("--alpha", default=16.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--targets", default="q_proj,v_proj", show_default=True, help="Comma-separated module names.")
@click.option("--steps", default=60, show_default=True, type=click.IntRange(1), help="Optimizer steps at most.")
@click.option("--lr", default=1e-3, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--batch-size", default=4, show_default=True, type=click.IntRange(1))
@click.option("--eval-fraction", default=0.2, show_default=True, type=click.FloatRange(0, 0.5),
              help="Held-out share of the records for early stopping.")
@click.option("--patience", default=3, show_default=True, type=click.IntRange(1),
              help="Evaluations without improvement before stopping early.")
@click.option("--eval-every", default=10, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--layers", default=None, type=click.IntRange(1),
              help="Adapt only the top N transformer blocks (faster: no backward pass below them).")
@click.option("--force", is_flag=True, help="Replace an adapter registered under the same name.")
@click.option("--json", "as_json", is_flag=True)
def train(base: str, data: str, name: str, rank: int, alpha: float, targets: str, steps: int, lr: float,
          batch_size: int, eval_fraction: float, patience: int, eval_every: int, seed: int, layers: int | None,
          force: bool, as_json: bool) -> None:
    """Fine-tune a LoRA on CPU (needs `pip install -e '.[lora]'`), convert it to GGUF, register it."""
    from ..lora.train import TrainSettings, train_adapter

    settings = TrainSettings(rank=rank, alpha=alpha, targets=tuple(t.strip() for t in targets.split(",") if t),
                             steps=steps, lr=lr, batch_size=batch_size, eval_fraction=eval_fraction,
                             patience=patience, eval_every=eval_every, seed=seed, layers=layers)
    log = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    record = train_adapter(base, data, name, settings, force=force, log=log)
    _show(record, as_json, "trained")


@lora.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def rm(name: str, as_json: bool) -> None:
    """Remove a registered adapter (or a broken one `tiankong lora list` names)."""
    if name in L.broken_adapters():
        folder = L.remove_broken_adapter(name)
        if as_json:
            emit_json({"name": name, "path": str(folder), "broken": True})
        else:
            click.echo(f"removed the broken adapter {name} ({folder})")
        return
    _show(L.remove_adapter(name), as_json, "removed")


def _size(n: int) -> str:
    """Bytes in MB, or KB under 0.1 MB (an 18 KB adapter was listed as "0.0 MB")."""
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} KB"
