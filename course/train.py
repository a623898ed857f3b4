"""Train the course models from scratch: ``python -m course.train`` (``make model``).

Fixed seeds, a fixed number of steps, AdamW with warm-up and cosine decay, bf16 autocast on the
CPU where it helps. Writes ``data/models/<name>/`` (weights, card with losses and samples, a loss
log) and the manifest's checksums. Sized to train both models in under an hour on 2 CPU cores.

Not handled: resuming a stopped run, several devices.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from course import checkpoints, corpus, distillation, evaluation, withheld
from course.model import CONFIGS, LanguageModel, ModelConfig, generate


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int = 16
    seq_len: int = 256
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_windows: int = 32
    seed: int = 0
    bf16: bool = True
    teacher: str | None = None  # a trained model to distil from (its soft targets), or hard labels only
    temperature: float = 1.0
    soft_weight: float = 1.0


# "distilled" is the draft's architecture and schedule, taught by the target instead of the text alone
SCHEDULES = {
    "target": TrainConfig(steps=1800),
    "draft": TrainConfig(steps=1500, lr=3e-3),
    "distilled": TrainConfig(steps=1500, lr=3e-3, teacher="target"),
}
ARCHITECTURE = {"target": "target", "draft": "draft", "distilled": "draft"}


def batches(data: torch.Tensor, batch: int, seq_len: int, generator: torch.Generator):
    """Endless (B, seq_len + 1) windows at random offsets of ``data``."""
    while True:
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=generator)
        yield torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()])  # (B, seq_len + 1)


def learning_rate(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def loss_on(model: LanguageModel, windows: torch.Tensor, bf16: bool = False) -> float:
    """Mean next-byte cross-entropy (nats) over (N, T + 1) windows."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(windows[:, :-1])  # (N, T, vocab)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()


def fixed_windows(data: torch.Tensor, count: int, seq_len: int) -> torch.Tensor:
    """``count`` evenly spaced (seq_len + 1)-byte windows: the same every time."""
    starts = torch.linspace(0, len(data) - seq_len - 2, count).long().tolist()
    return torch.stack([data[s : s + seq_len + 1] for s in starts])


def train(
    config: ModelConfig,
    cfg: TrainConfig,
    data: torch.Tensor,
    validation: torch.Tensor,
    log_path=None,
    progress: bool = True,
    description: str = "training",
    teacher: LanguageModel | None = None,
    distillation_loss=None,
) -> tuple[LanguageModel, list[dict]]:
    """Train a fresh model; returns it and the log rows (step, train_loss, val_loss, seconds).

    With a ``teacher`` the loss is :func:`course.distillation.soft_target_mix` of the teacher's soft
    targets at ``cfg.temperature`` (by ``distillation_loss``, chapter 7's exercise) and the hard
    labels; ``train_loss`` logs that mix.
    """
    if teacher is not None and distillation_loss is None:
        raise ValueError("distilling from a teacher needs a distillation_loss (chapter 7's exercise): pass it")
    torch.manual_seed(cfg.seed)
    model = LanguageModel(config)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    stream = batches(data, cfg.batch, cfg.seq_len, torch.Generator().manual_seed(cfg.seed))
    held_out = fixed_windows(validation, cfg.eval_windows, cfg.seq_len)
    rows, smoothed, started = [], None, time.monotonic()
    bar = tqdm(range(cfg.steps), desc=description, disable=not progress, mininterval=2)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        window = next(stream)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(window[:, :-1])  # (B, T, vocab)
        if teacher is None:
            loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size), window[:, 1:].reshape(-1))
        else:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                soft = teacher(window[:, :-1])  # (B, T, vocab)
            loss = distillation.soft_target_mix(
                logits, soft, window[:, 1:], cfg.temperature, cfg.soft_weight, distillation_loss=distillation_loss
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        smoothed = loss.item() if smoothed is None else 0.95 * smoothed + 0.05 * loss.item()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            model.eval()
            val = loss_on(model, held_out, cfg.bf16)
            model.train()
            rows.append(
                {
                    "step": step + 1,
                    "train_loss": round(smoothed, 4),
                    "val_loss": round(val, 4),
                    "seconds": round(time.monotonic() - started, 1),
                }
            )
            bar.set_postfix(train=f"{smoothed:.3f}", val=f"{val:.3f}")
            if log_path is not None:
                with open(log_path, "w", newline="") as handle:
                    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)
    return model.eval(), rows


def _distillation_loss():
    """The course's distillation loss (chapter 7's answer), which the distilled draft is trained with;
    the learners' copy withholds it, and says so."""
    if withheld.in_learners_copy():
        raise SystemExit(
            "the distilled draft is trained with chapter 7's distillation_loss, which this copy of the course "
            "withholds: train the others by name (python -m course.train target draft)"
        )
    return distillation.course_answer("distillation_loss")


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the course's target and draft models.")
    parser.add_argument(
        "names",
        nargs="*",
        choices=[*SCHEDULES, []],
        metavar="NAME",
        help=f"models to train: {', '.join(SCHEDULES)} (default: all, in that order)",
    )
    parser.add_argument("--steps", type=int, default=None, help="override the number of steps (for a trial)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    train_data, validation = corpus.tokens("train"), corpus.tokens("validation")
    for name in args.names or list(SCHEDULES):
        cfg = SCHEDULES[name]
        if args.steps:
            cfg = TrainConfig(**{**cfg.__dict__, "steps": args.steps})
        folder = checkpoints.MODELS / name
        folder.mkdir(parents=True, exist_ok=True)
        teacher = checkpoints.load(cfg.teacher) if cfg.teacher else None
        model, rows = train(
            CONFIGS[ARCHITECTURE[name]],
            cfg,
            train_data,
            validation,
            folder / "log.csv",
            description=name,
            teacher=teacher,
            distillation_loss=_distillation_loss() if teacher is not None else None,
        )
        started = time.monotonic()
        val = evaluation.text_loss(model, corpus.tokens("validation"), batch=32)
        comedies = evaluation.text_loss(model, corpus.tokens("comedies"), batch=32)
        prompt = corpus.encode("KING HENRY:\n")[None]
        sample = corpus.decode(
            generate(model, prompt, 300, temperature=0.8, top_k=40, generator=torch.Generator().manual_seed(0))[0]
        )
        card = {
            "training": cfg.__dict__,
            "parameters": model.num_parameters(),
            "validation_loss": round(val, 4),
            "comedies_loss": round(comedies, 4),
            "train_seconds": rows[-1]["seconds"],
            "eval_seconds": round(time.monotonic() - started, 1),
            "splits": {k: {"plays": v["plays"], "bytes": v["bytes"]} for k, v in corpus.summary().items()},
            "sample": sample,
        }
        checkpoints.save(model, name, card)
        print(
            f"{name}: {model.num_parameters():,} parameters, validation {val:.3f} nats/byte, "
            f"comedies {comedies:.3f}, {rows[-1]['seconds']:.0f} s\n{sample}"
        )


if __name__ == "__main__":
    main()
