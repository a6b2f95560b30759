"""Train the tiny Llama on a tokenized corpus: a standalone script run by an interpreter with torch.

unillm's dev venv has no torch, so :mod:`unillm.testing.trained_model` writes the tokenized corpus
and the model config into a folder and runs this file (not the package: only the standard
library, torch and transformers are imported) with a Python that has them, by default the managed
vLLM env's::

    python torch_trainer.py FOLDER     # reads config.json, train.jsonl, eval.jsonl, train_args.json
                                       # writes model.safetensors and train_report.json

``train.jsonl``/``eval.jsonl``/``contract.jsonl`` lines are ``{"ids": [...], "mask": [...]}``: the
model learns to predict ``ids[i]`` where ``mask[i]`` is 1. The *contract* rows are the answers
tests rely on: they are trained on too (``contract_repeat`` copies each), and greedy decoding must
reproduce every one of them by a logit margin of at least ``contract_margin`` (so another CPU's
rounding cannot flip a token). Training stops once the contract holds and greedy decoding
reproduces ``target_exact`` of the evaluation examples (checked every ``eval_every`` steps), or after
``steps`` once the contract holds; up to ``extra_steps`` more are spent on a contract that does not.
A contract still broken then exits with status 3 and names the rows in ``train_report.json``.
Progress goes to stderr.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any


def _load(path: Path) -> list[tuple[list[int], list[int]]]:
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows.append((row["ids"], row["mask"]))
    return rows


def _batches(rows: list[tuple[list[int], list[int]]], batch: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped into batches of similar length (little padding), in random order."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    out: list[list[int]] = []
    window = batch * 32
    for i in range(0, len(order), window):
        chunk = sorted(order[i : i + window], key=lambda j: len(rows[j][0]))
        out.extend(chunk[k : k + batch] for k in range(0, len(chunk) - batch + 1, batch))
    rng.shuffle(out)
    return out


def _tensors(rows: list[tuple[list[int], list[int]]], idx: list[int], pad: int) -> tuple[Any, Any]:
    import torch

    width = max(len(rows[j][0]) for j in idx)
    ids = torch.full((len(idx), width), pad, dtype=torch.long)
    labels = torch.full((len(idx), width), -100, dtype=torch.long)
    for r, j in enumerate(idx):
        seq, mask = rows[j]
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, : len(seq)] = torch.tensor([t if m else -100 for t, m in zip(seq, mask, strict=True)])
    return ids, labels


def _exact(model: Any, rows: list[tuple[list[int], list[int]]], pad: int) -> float:
    """Share of rows whose every masked token is the argmax (so greedy decoding reproduces it)."""
    import torch

    model.eval()
    good = 0
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            idx = list(range(start, min(start + 64, len(rows))))
            ids, labels = _tensors(rows, idx, pad)
            logits = model(input_ids=ids).logits[:, :-1]
            target = labels[:, 1:]
            wrong = (logits.argmax(-1) != target) & (target != -100)
            good += int((~wrong.any(dim=1)).sum())
    model.train()
    return float(good) / len(rows)


def _margins(model: Any, rows: list[tuple[list[int], list[int]]], pad: int) -> list[float]:
    """Per row, the smallest margin by which each masked token beats every other token (greedy
    decoding reproduces the row exactly when it is above 0)."""
    import torch

    model.eval()
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            idx = list(range(start, min(start + 64, len(rows))))
            ids, labels = _tensors(rows, idx, pad)
            logits = model(input_ids=ids).logits[:, :-1].float()
            target = labels[:, 1:]
            masked = target != -100
            right = logits.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            others = logits.scatter(-1, target.clamp(min=0).unsqueeze(-1), float("-inf")).amax(-1)
            margin = torch.where(masked, right - others, torch.full_like(right, float("inf")))
            out.extend(float(m) for m in margin.amin(dim=1))
    model.train()
    return out


def _progress(step: int, steps: int, loss_avg: float, t0: float, detail: str = "") -> None:
    print(
        f"[unillm] training the tiny model: step {step}/{steps}, loss {loss_avg:.3f}, "
        f"{detail}{time.perf_counter() - t0:.0f}s",
        file=sys.stderr,
        flush=True,
    )


def _train_step(model: Any, optim: Any, sched: Any, ids: Any, labels: Any) -> float:
    """One optimizer step on a batch; returns its loss."""
    import torch

    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    optim.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optim.step()
    sched.step()
    return float(loss.detach())


def _optimizer(model: Any, args: dict[str, Any]) -> tuple[Any, Any]:
    """AdamW with a linear warmup then a cosine decay to a tenth of the rate over ``steps``."""
    import torch

    steps, lr, warmup = int(args["steps"]), float(args["lr"]), int(args["warmup"])
    optim = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        done = min(step, steps) - warmup  # past ``steps`` (a contract not yet held): the final rate
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done / max(1, steps - warmup)))

    return optim, torch.optim.lr_scheduler.LambdaLR(optim, schedule)


def _save(model: Any, folder: Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def main(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    args = json.loads((folder / "train_args.json").read_text())
    torch.manual_seed(args["seed"])
    torch.set_num_threads(args.get("threads", 2))
    rng = random.Random(args["seed"])
    config = LlamaConfig.from_pretrained(str(folder))
    model = LlamaForCausalLM(config)
    train, evaluation = _load(folder / "train.jsonl"), _load(folder / "eval.jsonl")
    contract = _load(folder / "contract.jsonl") if (folder / "contract.jsonl").is_file() else []
    train += contract * int(args.get("contract_repeat", 0))
    need = float(args.get("contract_margin", 0.0))
    pad = int(config.pad_token_id or 0)
    steps, batch, every = int(args["steps"]), int(args["batch"]), args["eval_every"]
    optim, sched = _optimizer(model, args)
    t0 = time.perf_counter()
    queue: list[list[int]] = []
    exact, step, loss_avg, margins = 0.0, 0, 0.0, [0.0] * len(contract)
    for step in range(1, steps + int(args.get("extra_steps", 0)) + 1):
        if not queue:
            queue = _batches(train, batch, rng)
        value = _train_step(model, optim, sched, *_tensors(train, queue.pop(), pad))
        loss_avg = 0.9 * loss_avg + 0.1 * value if step > 1 else value
        if step % 50 == 0 and step % every:
            _progress(step, steps, loss_avg, t0)
        if step % every == 0 or step >= steps:
            margins = _margins(model, contract, pad)
            held = all(m >= need for m in margins)
            if step % every == 0 or step == steps:
                exact = _exact(model, evaluation, pad)
                kept = sum(m >= need for m in margins)
                _progress(
                    step, steps, loss_avg, t0, f"greedy-exact {exact:.1%}, contract {kept}/{len(margins)}, "
                )
            if held and (exact >= args["target_exact"] or step >= steps):
                break
    _save(model, folder)
    report = {
        "steps": step,
        "loss": round(loss_avg, 4),
        "greedy_exact": round(exact, 4),
        "contract_rows": len(margins),
        "contract_min_margin": round(min(margins), 3) if margins else None,
        "contract_broken": [i for i, m in enumerate(margins) if m < need],
        "seconds": round(time.perf_counter() - t0, 1),
        "torch": torch.__version__,
    }
    (folder / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    if report["contract_broken"]:
        sys.exit(3)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
