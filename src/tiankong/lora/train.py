"""``tiankong lora train``: a small LoRA fine-tune of an installed GGUF model on CPU, converted and registered.

The GGUF model is loaded into ``transformers`` dequantized to float32 (``gguf_file=``; llama, qwen2 and gemma3
are supported there), trained with ``peft`` on the answer tokens only (the prompt, rendered with the model's own
chat template, is masked out of the loss), stopped early when the held-out loss stops improving (the best
weights are kept), converted with llama.cpp's ``convert_lora_to_gguf.py`` and registered for the base model.
torch, transformers and peft come from the optional ``[lora]`` extra and are imported only here.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..models import resolve_installed
from .base import load_base
from .convert import convert_adapter, write_base_config
from .data import Example, load_examples, split
from .meta import read_header
from .registry import AdapterRecord, add_adapter, check_name, lora_dir

Log = Callable[[str], None]
IGNORE = -100  # label ignored by the loss


class MissingTrainingExtra(ConfigError):
    type = "missing_dependency"

    def __init__(self, module: str) -> None:
        super().__init__(f"tiankong lora train needs torch, transformers and peft ({module} is not installed)",
                         hint="pip install -e '.[lora]' (torch==2.13.0: on Linux install its CPU build first, "
                              "or pip pulls CUDA packages)")


@dataclass
class TrainSettings:
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    steps: int = 60  # optimizer steps at most
    lr: float = 1e-3
    batch_size: int = 4
    eval_fraction: float = 0.2
    eval_every: int = 10
    patience: int = 3  # evaluations without improvement before stopping
    max_tokens: int = 256  # longest example (prompt + answer) in tokens
    seed: int = 0
    threads: int | None = None  # torch threads; None: torch's default (OMP_NUM_THREADS)
    layers: int | None = None  # LoRA on the top ``layers`` transformer blocks only (None: all of them)


@dataclass
class TrainReport:
    examples: int
    train_examples: int
    eval_examples: int
    steps: int
    stopped_early: bool
    first_loss: float
    last_loss: float
    best_eval_loss: float | None
    eval_losses: list[float] = field(default_factory=list)
    load_s: float = 0.0
    train_s: float = 0.0
    convert_s: float = 0.0


def _require() -> Any:
    for module in ("torch", "transformers", "peft"):
        try:
            __import__(module)
        except ImportError:
            raise MissingTrainingExtra(module) from None
    import torch

    return torch


def encode(tokenizer: Any, example: Example, max_tokens: int) -> tuple[list[int], list[int]]:
    """Token ids of prompt + answer, and labels with the prompt masked (only the answer is learned)."""
    prompt = tokenizer.apply_chat_template(example.messages, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(
        [*example.messages, {"role": "assistant", "content": example.answer}], tokenize=False)
    if not full.startswith(prompt):
        full = prompt + example.answer + (tokenizer.eos_token or "")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
    ids = list(prompt_ids) + list(answer_ids)
    if len(ids) > max_tokens:
        raise ConfigError(f"an example has {len(ids)} tokens, more than max_tokens {max_tokens}",
                          hint="shorten the example or raise max_tokens")
    return ids, [IGNORE] * len(prompt_ids) + list(answer_ids)


def _batch(rows: list[tuple[list[int], list[int]]], pad_id: int, torch: Any) -> dict[str, Any]:
    """Left-padded, so every answer ends at the last position: logits are computed for the answer only."""
    width = max(len(ids) for ids, _ in rows)
    ids = [[pad_id] * (width - len(r[0])) + r[0] for r in rows]
    labels = [[IGNORE] * (width - len(r[1])) + r[1] for r in rows]
    mask = torch.tensor([[0] * (width - len(r[0])) + [1] * len(r[0]) for r in rows])
    answer = max(len(r[1]) - next((i for i, x in enumerate(r[1]) if x != IGNORE), len(r[1])) for r in rows)
    return {"input_ids": torch.tensor(ids), "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0), "labels": torch.tensor(labels), "answer": answer}


def _loss(model: Any, batch: dict[str, Any], torch: Any) -> Any:
    """Mean cross-entropy of the answer tokens. Only the last ``answer + 1`` positions get logits: on a CPU the
    vocabulary projection of every prompt position costs about as much as the rest of the step (measured)."""
    keep = max(1, int(batch["answer"]))
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], logits_to_keep=keep + 1)
    logits = out.logits[:, :-1].float()
    target = batch["labels"][:, -keep:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                             ignore_index=IGNORE)


def _mean_loss(model: Any, rows: list[tuple[list[int], list[int]]], pad_id: int, size: int, torch: Any) -> float:
    model.eval()
    with torch.no_grad():
        losses = [float(_loss(model, _batch(rows[i:i + size], pad_id, torch), torch))
                  for i in range(0, len(rows), size)]
    model.train()
    return sum(losses) / len(losses)


def _fit(model: Any, train: list[Any], held: list[Any], pad_id: int, s: TrainSettings, torch: Any,
         log: Log) -> TrainReport:
    """The training loop: AdamW on the LoRA weights, held-out loss every ``eval_every`` steps, best weights kept."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=s.lr)
    rng, order = random.Random(s.seed), list[int]()
    losses: list[float] = []
    report = TrainReport(0, len(train), len(held), 0, False, 0.0, 0.0, None)
    best: dict[str, Any] | None = None
    stale = 0
    for step in range(1, s.steps + 1):
        if len(order) < s.batch_size:
            order += rng.sample(range(len(train)), len(train))
        picked, order = order[:s.batch_size], order[s.batch_size:]
        loss = _loss(model, _batch([train[i] for i in picked], pad_id, torch), torch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        report.steps = step
        if held and (step % s.eval_every == 0 or step == s.steps):
            current = _mean_loss(model, held, pad_id, s.batch_size, torch)
            report.eval_losses.append(round(current, 4))
            log(f"step {step}: train loss {losses[-1]:.3f}, held-out loss {current:.3f}")
            if report.best_eval_loss is None or current < report.best_eval_loss - 1e-4:
                report.best_eval_loss, stale = current, 0
                best = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
            else:
                stale += 1
                if stale >= s.patience:
                    report.stopped_early = True
                    log(f"stopping early: no held-out improvement in {stale} evaluations")
                    break
    if best is not None:
        model.load_state_dict(best, strict=False)
    report.first_loss, report.last_loss = round(losses[0], 4), round(losses[-1], 4)
    return report


@dataclass
class Trained:
    """One adapter trained by :func:`train_adapters`: its GGUF file and the training report."""

    path: Path
    report: TrainReport
    settings: TrainSettings


def train_adapters(base: str, datasets: list[list[Example]], out_dir: Path, settings: TrainSettings | None = None,
                   *, log: Log = lambda _: None) -> list[Trained]:
    """One LoRA per dataset for the installed model ``base``, as GGUF files ``out_dir/<i>.gguf`` (not registered).

    The base model is loaded into ``transformers`` once; each adapter is put on, trained, saved, converted and
    taken off again, so k adapters (a cross-validation) cost one load."""
    s = settings or TrainSettings()
    if not s.targets:
        raise ConfigError("no target modules", hint="e.g. --targets q_proj,v_proj")
    record = resolve_installed(base)
    check_base(record, s)  # before torch and the minutes-long load: what cannot train fails now
    torch = _require()
    if s.threads:
        torch.set_num_threads(s.threads)
    started = time.monotonic()
    tokenizer, model = load_base(record, torch, log)
    load_s = time.monotonic() - started
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    architecture = type(model).__name__
    config = model.config.to_dict()
    out_dir.mkdir(parents=True, exist_ok=True)
    found: list[Trained] = []
    for number, examples in enumerate(datasets):
        torch.manual_seed(s.seed)
        train_set, held_set = split(examples, s.eval_fraction, s.seed)
        train = [encode(tokenizer, e, s.max_tokens) for e in train_set]
        held = [encode(tokenizer, e, s.max_tokens) for e in held_set]
        lora_model = _wrap(model, s, int(config.get("num_hidden_layers") or 0))
        log(f"adapter {number + 1}/{len(datasets)}: rank {s.rank} on {', '.join(s.targets)}"
            f"{f' (top {s.layers} layers)' if s.layers else ''}: {len(train)} examples, {len(held)} held out, "
            f"≤ {s.steps} steps")
        started = time.monotonic()
        report = _fit(lora_model, train, held, pad_id, s, torch, log)
        report.examples, report.load_s = len(examples), round(load_s, 1)
        report.train_s = round(time.monotonic() - started, 1)
        with tempfile.TemporaryDirectory(prefix="tiankong-lora-") as tmp:
            work = Path(tmp)
            lora_model.save_pretrained(work / "adapter")
            started = time.monotonic()
            out = convert_adapter(work / "adapter", write_base_config(config, architecture, work / "base"),
                                  out_dir / f"{number}.gguf", log)
            report.convert_s = round(time.monotonic() - started, 1)
        model = lora_model.unload()  # the base model again, for the next adapter
        found.append(Trained(out, report, s))
    return found


def train_adapter(base: str, data: str | Path, name: str, settings: TrainSettings | None = None, *,
                  force: bool = False, log: Log = lambda _: None) -> AdapterRecord:
    """Fine-tune a LoRA for the installed model ``base`` on ``data`` (JSONL), convert it, register it as ``name``."""
    s = settings or TrainSettings()
    check_name(name)
    if (lora_dir() / name / "manifest.json").exists() and not force:
        raise ConfigError(f"adapter {name!r} is already registered", hint="choose another name or pass --force")
    examples = load_examples(data)
    with tempfile.TemporaryDirectory(prefix="tiankong-lora-") as tmp:
        (trained,) = train_adapters(base, [examples], Path(tmp), s, log=log)
        return add_adapter(trained.path, name=name, base=resolve_installed(base).name, force=force,
                           training=training_record(trained, str(data)), source=f"train:{Path(data).name}")


def training_record(trained: Trained, data: str) -> dict[str, Any]:
    s = trained.settings
    return {**asdict(trained.report), "settings": {**asdict(s), "targets": list(s.targets)}, "data": data}


#: the architectures tiankong trains on (transformers reads their GGUF, llama.cpp converts their adapters; the ones
#: tested), and the projections their blocks have
TRAINABLE = ("llama", "qwen2", "gemma3")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def check_base(record: Any, s: TrainSettings) -> None:
    """Refuse before loading: a model that is not a chat model of a trainable architecture, a target its blocks do
    not have, more layers than it has (an embedding part failed after the load as an internal error; a wrong target
    after it; --layers 999 on 30 blocks was taken)."""
    values = read_header(record.path, "model").values
    arch = str(values.get("general.architecture", "unknown"))
    if (record.catalog is not None and record.catalog.kind != "chat") or arch not in TRAINABLE:
        raise ConfigError(f"{record.name} ({arch}) is not a chat model LoRA trains on here",
                          hint=f"use a chat model of architecture {', '.join(TRAINABLE)} (`tiankong models list`)")
    unknown = [t for t in s.targets if t not in PROJECTIONS]
    if unknown:
        raise ConfigError(f"{arch} blocks have no {', '.join(unknown)}", hint=f"targets: {', '.join(PROJECTIONS)}")
    blocks = values.get(f"{arch}.block_count")
    if s.layers is not None and isinstance(blocks, int) and not 1 <= s.layers <= blocks:
        raise ConfigError(f"--layers {s.layers}: {record.name} has {blocks} blocks", hint=f"give 1 to {blocks}")


def _wrap(model: Any, s: TrainSettings, n_layers: int) -> Any:
    from peft import LoraConfig, get_peft_model

    options: dict[str, Any] = {"r": s.rank, "lora_alpha": s.alpha, "target_modules": list(s.targets),
                               "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM"}
    if s.layers and n_layers:  # no gradient flows below the lowest adapted block: the backward pass is shorter
        options["layers_to_transform"] = list(range(max(0, n_layers - s.layers), n_layers))
    config = LoraConfig(**options)
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise ConfigError(f"cannot put LoRA on {', '.join(s.targets)}: {exc}",
                          hint="use module names of the model, e.g. q_proj,k_proj,v_proj,o_proj") from None
