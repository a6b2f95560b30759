"""The real vLLM-CPU engine the serving benchmarks measure: launched through unillm, or given.

    async with vllm_target(url=None, max_num_seqs=64) as engine:
        engine.url, engine.model_path, engine.served_name, engine.command

Launching uses the project's CPU recipe (``unillm.testing.engines.cpu_launch_settings``) with the
tiny model built locally; ``--url URL --model-path DIR`` measures an engine that already runs.
vLLM-CPU places its own threads (``reserved_cpus`` in its log when it pins its compute thread;
vLLM 0.32 on a 2-core AMD EPYC left them all on both cores); the benchmark client runs in this
process and its children.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from unillm.testing.tiny_model import (
    MANIFEST,
    MAX_POSITION,
    MODEL_SEED,
    VOCAB_SIZE,
    LlamaShape,
    TinyModel,
    build_tiny_model,
    dump_json,
    publish,
    write_llama,
    write_tokenizer,
)

CACHE = Path(os.environ.get("UNILLM_CACHE", Path.home() / ".cache" / "unillm"))
VLLM_PYTHON = CACHE / "envs" / "vllm" / "bin" / "python"
#: :func:`wide_model`'s sizes: 8 layers of width 1024, about 120M parameters (490 MB in float32).
WIDE = LlamaShape(VOCAB_SIZE, MAX_POSITION, 1024, 4096, 8, 16, 4, 64)
#: :func:`wide_model`'s sizes with ``deep=True``: three times the layers (about 30 ms a decode step).
DEEP = WIDE._replace(layers=24)


@dataclass(frozen=True)
class Engine:
    """Where the engine listens and what it serves."""

    url: str
    model_path: str
    served_name: str
    command: str
    api_key: str | None = None


@contextlib.asynccontextmanager
async def vllm_target(
    url: str | None,
    model_path: str | None,
    *,
    max_num_seqs: int = 64,
    served_name: str = "tiny",
    prefix_caching: bool | None = None,
    wide: bool = False,
    deep: bool = False,
) -> AsyncIterator[Engine]:
    """Yield a running vLLM-CPU engine: the one at ``url``, or one launched for the benchmark
    (``prefix_caching``: the engine's default when None; ``wide``: :func:`wide_model`, not the
    tiny model; ``deep``: :func:`wide_model` with three times its layers)."""
    if url is not None:
        if model_path is None:
            raise SystemExit("--url needs --model-path (the served model's folder, for its tokenizer)")
        yield Engine(url, model_path, served_name, "(given)")
        return
    import unillm
    from unillm.testing.engines import cpu_launch_settings

    tiny = wide_model(deep) if wide or deep else build_tiny_model()
    with tempfile.TemporaryDirectory(prefix="unillm-bench-") as d:
        settings = cpu_launch_settings(
            "vllm", tiny, Path(d), max_num_seqs=max_num_seqs, api_key=None, served_name=served_name
        )
        if prefix_caching is not None:
            settings["prefix_caching"] = prefix_caching
        run = unillm.launch("vllm", **settings, log_path=Path(d) / "vllm.log")
        print(f"[bench] launching vLLM-CPU (max_num_seqs={max_num_seqs}) ...", file=sys.stderr)
        async with run:
            yield Engine(run.base_url, str(tiny.path), served_name, run.command().render())


def wide_model(deep: bool = False) -> TinyModel:
    """The tiny model's tokenizer on a wider random Llama (:data:`WIDE`, or :data:`DEEP` when
    ``deep``), built once and cached.

    A decode step of the tiny model costs well under a millisecond, so on two cores a harness's
    own CPU moves what it measures; this model's costs 10-15 ms for one stream (21 ms for 8 on one
    core), the pace of a real model on a GPU, and the engine, not the harness, sets the figures.
    """

    shape = DEEP if deep else WIDE

    def write(tmp: Path, final: Path) -> None:
        (tmp / "model").mkdir()
        write_llama(tmp / "model", shape, write_tokenizer(tmp / "model"), seed=MODEL_SEED)
        dump_json(tmp / MANIFEST, {"shape": shape._asdict()})

    folder = publish(CACHE / "models" / ("deep-llama-v1" if deep else "wide-llama-v1"), write)
    return TinyModel(folder / "model", {}, shape.vocab_size, shape.max_position)
