"""mlx-lm's launch: the server command line, the managed install, the CPU recipe and the
settings mlx-lm cannot honour (pure).

    command(LaunchSpec(model="/models/qwen-4bit", port=8080)).argv   # python -c SERVER_MAIN --model ...
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from unillm.adapter import CpuRecipe, LaunchCommand, LaunchSpec, Refuse, unsupported
from unillm.adapter.base import EngineInstall
from unillm.adapter.refusals import is_loopback

__all__ = [
    "MLX_LM_VERSION",
    "MLX_VERSION",
    "SERVER_MAIN",
    "command",
    "cpu_recipe",
    "install",
    "looks_like_path",
    "refuse_unsupported",
]

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
GRAMMAR_ENGINE = "llguidance>=1.9,<2"
# `python -m mlx_lm server`, except that the first generated token keeps its leading space: mlx-lm's
# streaming detokenizers trim it, while vLLM, SGLang and unillm's in-process MLX keep it (the text is
# the tokens' text). Where mlx-lm has no such detokenizer class, nothing is changed.
SERVER_MAIN = """\
import sys
from mlx_lm import tokenizer_utils as t
bpe, spm = getattr(t, "BPEStreamingDetokenizer", None), getattr(t, "SPMStreamingDetokenizer", None)
if bpe is not None and hasattr(bpe, "_maybe_trim_space"):
    bpe._maybe_trim_space = lambda self, text: text
if spm is not None and spm.__init__.__defaults__ == (True,):
    spm.__init__.__defaults__ = (False,)
from mlx_lm.server import main
sys.argv[0] = "mlx_lm.server"
main()
"""
SINGLE_DEVICE = unsupported("mlx-lm runs a model on one device", "Use vLLM or SGLang to split a model")
NO_EMBEDDINGS = unsupported(
    "mlx-lm serves generative models and has no embeddings API",
    'Serve the embedding model with unillm.launch("vllm", ..., task="embed") or "sglang"',
)
DRAFT_ONLY = unsupported(
    "mlx-lm only speculates with a draft model",
    'Use unillm.Speculative(method="draft", draft_model=..., num_tokens=k)',
)


def install(*, gpu: bool) -> EngineInstall:
    """mlx with Metal (macOS), CUDA (``gpu``) or the CPU build, mlx-lm and llguidance (pinned)."""
    if sys.platform == "darwin":
        mlx = f"mlx=={MLX_VERSION}"  # Metal is built in on Apple Silicon
    else:
        mlx = f"mlx[{'cuda' if gpu else 'cpu'}]=={MLX_VERSION}"
    return EngineInstall(packages=(mlx, f"mlx-lm=={MLX_LM_VERSION}", GRAMMAR_ENGINE))


def command(spec: LaunchSpec) -> LaunchCommand:
    """``mlx_lm server`` (through :data:`SERVER_MAIN`) with the spec's flags."""
    refuse_unsupported(spec, in_process=spec.in_process)  # also checks in-process specs
    argv = [spec.python or "python", "-c", SERVER_MAIN, "--model", spec.model, "--host", spec.host]
    if spec.port is not None:
        argv += ["--port", str(spec.port)]
    if spec.max_num_seqs is not None:
        argv += ["--decode-concurrency", str(spec.max_num_seqs)]
    no_prompt_cache = spec.prefix_caching is False
    if spec.speculative is not None:
        assert spec.speculative.draft_model is not None  # Speculative validates "draft"
        argv += [
            "--draft-model",
            spec.speculative.draft_model,
            "--num-draft-tokens",
            str(spec.speculative.num_tokens),
        ]
        no_prompt_cache = True  # with a draft model, a prompt-cache hit gives wrong greedy output
    if no_prompt_cache:
        argv += ["--prompt-cache-size", "0"]
    env: dict[str, str] = {}
    if looks_like_path(spec.model):
        # A local model needs no hub: offline keeps unknown-model errors fast, and an existing
        # HF_HUB_CACHE keeps /v1/models from answering an empty body. spec.env overrides both.
        env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": spec.model}
    argv += spec.extra_args
    return LaunchCommand(argv=argv, env=env, health_path="/health")


def cpu_recipe(spec: LaunchSpec, workdir: Path) -> CpuRecipe:
    """mlx-lm on a CPU (``mlx[cpu]``, the build ``unillm setup mlx`` picks without a GPU).

    MLX needs no memory settings; the recipe keeps a local model off the hub (mlx_lm.server
    lists ``HF_HUB_CACHE`` in /v1/models, so it points at an empty folder in ``workdir``),
    turns the unneeded API key off (mlx_lm.server has no authentication) and, in server mode,
    converts PEFT LoRA adapters to mlx-lm's layout in ``workdir`` before launching.
    """
    from unillm_mlx.peft import with_mlx_loras

    hub = workdir / "hf-hub"
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub)} if looks_like_path(spec.model) else {}
    return CpuRecipe(
        settings={"api_key": None, "env": env}, dirs=(hub,), prepare=partial(with_mlx_loras, workdir=workdir)
    )


def refuse_unsupported(spec: LaunchSpec, *, in_process: bool = False) -> None:
    """Raise UnsupportedFeature for launch settings mlx-lm (server or in-process) cannot honour."""
    no = Refuse("mlx")
    no.admission(spec, "mlx-lm")
    if spec.task == "embed":
        raise no('task="embed"', NO_EMBEDDINGS.why, NO_EMBEDDINGS.alternative)
    p = spec.parallel
    if p.tensor > 1 or p.pipeline > 1 or p.data > 1 or p.expert:
        raise no("parallel", "mlx-lm runs one model on one device", "Drop parallel=, or use vLLM / SGLang")
    if spec.speculative is not None and spec.speculative.method != "draft":
        raise no(
            f"speculative method {spec.speculative.method!r}",
            "mlx-lm only speculates with a draft model",
            DRAFT_ONLY.alternative,
        )
    unsupported_settings = {
        "dtype": "mlx-lm uses the dtype stored in the model",
        "memory_fraction": "mlx-lm has no memory-fraction setting",
        "quantization": "mlx-lm quantizes when converting, not at launch "
        "(mlx_lm.convert --hf-path ... -q), then launch the converted folder",
        "max_lora_rank": "mlx-lm reads the rank from each adapter's config",
    }
    if not in_process:  # the in-process engine honours these itself
        unsupported_settings.update(
            {
                "served_name": "mlx_lm.server serves the model under its path (or 'default_model')",
                "max_model_len": "mlx_lm.server has no context-length setting",
                "max_loras": "mlx_lm.server loads one adapter at a time (switching reloads the model)",
            }
        )
    no.set_settings(spec, unsupported_settings)
    if in_process:
        if spec.prefix_caching:
            raise no("prefix_caching", "the in-process engine keeps no prompt cache", "Drop prefix_caching=")
        return
    if spec.runtime_lora:
        raise no(
            "runtime_lora",
            "mlx_lm.server has no adapter endpoints",
            "Pass lora={name: path} at launch, or run MLX in-process (in_process=True)",
        )
    if spec.speculative is not None and spec.prefix_caching:
        raise no(
            "prefix_caching with a draft model",
            "with a draft model, a prompt-cache hit gives wrong greedy output in mlx_lm.server, "
            "so unillm turns its prompt cache off",
            "Drop prefix_caching= (or speculative=)",
        )
    key = spec.key()
    if key and not is_loopback(spec.host):
        raise no(
            "api_key",
            f"mlx_lm.server has no authentication, so the key would not protect {spec.host}",
            "Bind 127.0.0.1, or put an authenticating proxy in front",
        )


def looks_like_path(value: str) -> bool:
    """True for a local path (absolute, relative or ~): not a hub id nor an adapter name."""
    return value.startswith(("/", "./", "../", "~"))
