"""Convert a PEFT LoRA adapter (Hugging Face layout) to the layout mlx-lm loads.

    convert_peft_adapter("/adapters/sql-peft", "/adapters/sql-mlx")
    # then: unillm.launch("mlx", model=..., lora={"sql": "/adapters/sql-mlx"})

mlx-lm reads ``adapter_config.json`` (``fine_tune_type``, ``num_layers``, ``lora_parameters``)
and ``adapters.safetensors`` with ``<module>.lora_a`` (in x r) and ``<module>.lora_b`` (r x out);
PEFT stores ``lora_A.weight`` (r x in) and ``lora_B.weight`` (out x r) with scale alpha/r.
Needs numpy and safetensors (both come with mlx-lm). Command line:
``python -m unillm_mlx.peft SRC DST``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unillm.adapter import LaunchSpec

__all__ = ["convert_peft_adapter", "is_peft_adapter", "mlx_lora", "with_mlx_loras"]

_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+\.layers\.(?P<layer>\d+)\.(?P<sub>.+))"
    r"\.lora_(?P<ab>[AB])(?:\.default)?\.weight$"
)


def is_peft_adapter(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds a PEFT adapter (``adapter_config.json`` with ``peft_type``)."""
    config = Path(path) / "adapter_config.json"
    try:
        return "peft_type" in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def convert_peft_adapter(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """Write the mlx-lm form of the PEFT LoRA adapter ``src`` into ``dst`` (created; atomic).

    Raises ValueError for adapters mlx-lm cannot express (DoRA, per-module ranks or alphas).
    """
    import numpy as np
    from safetensors.numpy import load_file, save_file

    src, dst = Path(src), Path(dst)
    config: dict[str, Any] = json.loads((src / "adapter_config.json").read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{src}: not a PEFT LoRA adapter (peft_type={config.get('peft_type')!r})")
    if config.get("use_dora"):
        raise ValueError(f"{src}: DoRA adapters are not converted")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise ValueError(f"{src}: per-module ranks/alphas (rank_pattern/alpha_pattern) are not converted")
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    weights_file = src / "adapter_model.safetensors"
    if not weights_file.is_file():
        raise ValueError(f"{src}: adapter_model.safetensors is missing (only safetensors are converted)")
    tensors = load_file(str(weights_file))
    out: dict[str, Any] = {}
    keys: set[str] = set()
    for name, value in tensors.items():
        m = _KEY.match(name)
        if m is None:
            raise ValueError(f"{src}: unexpected tensor {name!r} (only LoRA A/B weights of layers)")
        keys.add(m["sub"])
        suffix = "lora_a" if m["ab"] == "A" else "lora_b"
        out[f"{m['module']}.{suffix}"] = np.ascontiguousarray(value.T.astype(np.float32))
    mlx_config = {
        "fine_tune_type": "lora",
        "num_layers": -1,  # mlx-lm: every layer; layers the adapter skips keep a zero update
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": sorted(keys)},
    }
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    save_file(out, str(tmp / "adapters.safetensors"))
    (tmp / "adapter_config.json").write_text(json.dumps(mlx_config, indent=2) + "\n")
    tmp.chmod(0o755)
    try:
        tmp.rename(dst)
    except OSError:
        if not (dst / "adapters.safetensors").is_file():  # someone else published it first
            raise
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return dst


def mlx_lora(adapter: str | os.PathLike[str], workdir: Path) -> str:
    """The adapter folder mlx-lm can load: a PEFT adapter is converted once into ``workdir``."""
    source = Path(adapter)
    if not is_peft_adapter(source):
        return str(source)
    target = workdir / "mlx-loras" / source.name
    if not (target / "adapters.safetensors").is_file():
        convert_peft_adapter(source, target)
    return str(target)


def with_mlx_loras(spec: LaunchSpec, workdir: Path) -> LaunchSpec:
    """``spec`` with its PEFT LoRA adapters converted for mlx_lm.server (the CPU recipe's step)."""
    if not spec.lora or spec.in_process:  # the in-process engine converts them itself
        return spec
    return spec.model_copy(update={"lora": {n: mlx_lora(p, workdir) for n, p in spec.lora.items()}})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m unillm_mlx.peft PEFT_ADAPTER_DIR MLX_ADAPTER_DIR")
    print(convert_peft_adapter(sys.argv[1], sys.argv[2]))
