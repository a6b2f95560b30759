"""MLX adapter for unillm: mlx-lm as a server (``mlx_lm.server``) or inside your process.

    async with unillm.launch("mlx", model="/models/qwen-4bit") as llm: ...            # a server
    async with unillm.launch("mlx", model="/models/qwen-4bit", in_process=True) as llm:
        r = await llm.generate("Date?", output=unillm.Regex(r"\\d{4}-\\d{2}-\\d{2}"))  # constrained

Server mode speaks mlx_lm.server's OpenAI API and handles its quirks: per-request adapters only
apply with an explicit model path (``lora="name"`` sends both), a draft model needs the prompt
cache off, and constrained output is refused (the server silently ignores it). In-process mode
answers the same API from mlx-lm inside this process, with constraints enforced during decoding
by llguidance; its discovery reports the version ``<mlx-lm version>+in-process``.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm.adapter import EngineInfo, EngineInstall, HttpCall
from unillm.adapter_helpers import EXTRA_SAMPLING
from unillm.capabilities import NATIVE, Capabilities, Feature, Support, unsupported
from unillm.errors import UnillmError, UnknownLora, UnsupportedFeature
from unillm.launch_spec import CpuRecipe, LaunchCommand, LaunchSpec
from unillm.metrics import MetricNames
from unillm.openai_compat import (
    COMPLETIONS_PATH,
    OpenAICompatAdapter,
    RuntimeLoraEndpoints,
    TokenizeEndpoint,
    error_for_status,
    error_message,
    structured_output,
)
from unillm.options import Constraint, Request

if TYPE_CHECKING:
    import httpx

    from unillm_mlx.peft import convert_peft_adapter as convert_peft_adapter
    from unillm_mlx.peft import is_peft_adapter as is_peft_adapter

__all__ = ["IN_PROCESS_SUFFIX", "MLXAdapter", "convert_peft_adapter", "is_in_process", "is_peft_adapter"]

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
GRAMMAR_ENGINE = "llguidance>=1.9,<2"
IN_PROCESS_SUFFIX = "+in-process"
DEFAULT_MODEL = "default_model"  # mlx_lm.server's name for the model given by --model
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
_IN_PROCESS_HINT = ('Run MLX in-process, where unillm enforces it: '
                    'unillm.launch("mlx", model=..., in_process=True)')
_CONSTRAINTS = (Feature.JSON_SCHEMA, Feature.REGEX, Feature.CHOICE, Feature.GRAMMAR, Feature.GRAMMAR_LARK)
_COMMON = (Feature.COMPLETION, Feature.CHAT, Feature.STREAM, Feature.LORA, Feature.TOP_K, Feature.MIN_P,
           Feature.REPETITION_PENALTY, Feature.PRESENCE_PENALTY, Feature.FREQUENCY_PENALTY, Feature.SEED,
           Feature.STOP, Feature.SPEC_DRAFT)
_SINGLE_DEVICE = unsupported("mlx-lm runs a model on one device", "Use vLLM or SGLang to split a model")
_NO_EMBEDDINGS = unsupported("mlx-lm serves generative models and has no embeddings API",
                             'Serve the embedding model with unillm.launch("vllm", ..., task="embed") '
                             'or "sglang"')
_DRAFT_ONLY = unsupported("mlx-lm only speculates with a draft model",
                          'Use unillm.Speculative(method="draft", draft_model=..., num_tokens=k)')


def __getattr__(name: str) -> Any:
    if name in ("convert_peft_adapter", "is_peft_adapter"):
        from unillm_mlx import peft

        return getattr(peft, name)
    raise AttributeError(f"module 'unillm_mlx' has no attribute {name!r}")


def is_in_process(version: str | None) -> bool:
    """True for the version string that unillm's in-process MLX engine reports."""
    return bool(version) and str(version).endswith(IN_PROCESS_SUFFIX)


class MLXAdapter(RuntimeLoraEndpoints, TokenizeEndpoint, OpenAICompatAdapter):
    """mlx-lm: ``mlx_lm.server`` (server mode) or mlx-lm in this process (``in_process=True``).

    ``unillm.launch`` binds the adapter to its launch settings (model path, LoRA names). To use
    LoRA names with a server you did not start, bind them yourself::

        llm = unillm.LLM(MLXAdapter(model_path="/m", loras={"sql": "/a/sql"}), "http://127.0.0.1:8080")
    """

    name = "mlx"
    display_name = "MLX"
    engine_module = "mlx_lm"
    extra_sampling_fields = EXTRA_SAMPLING

    def __init__(self, *, model_path: str | None = None, loras: Mapping[str, str] | None = None) -> None:
        self.model_path = model_path
        self.loras = dict(loras or {})

    def bind(self, spec: LaunchSpec) -> MLXAdapter:
        """This adapter, knowing the launched model path and LoRA names."""
        return MLXAdapter(model_path=spec.model, loras=spec.lora)

    def modes(self) -> dict[str, str | None]:
        """Capability-table columns: the server, and the engine inside your process."""
        return {"MLX": None, "MLX in-proc": MLX_LM_VERSION + IN_PROCESS_SUFFIX}

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        features: dict[Feature, Support] = {f: NATIVE for f in _COMMON}
        if is_in_process(version):
            by_unillm = Support(level="emulated", why="enforced during decoding by unillm (llguidance)")
            features.update({f: by_unillm for f in _CONSTRAINTS})
            features[Feature.N] = Support(level="emulated", why="unillm generates the answers one by one")
            features[Feature.LOGPROBS] = NATIVE
            features[Feature.LORA_RUNTIME] = Support(level="emulated",
                                                     why="unillm loads mlx-lm adapters by name")
            forced = Support(level="emulated", why="the call is forced by unillm (llguidance)")
            features[Feature.TOOLS] = features[Feature.TOOL_CHOICE_REQUIRED] = forced
            features[Feature.TOOL_CHOICE_NAMED] = forced
            features[Feature.TOOL_CHOICE_AUTO] = unsupported(
                "in-process MLX does not read calls out of free text",
                "Pass tool_choice='required' or a tool's name (forced by unillm), or use server mode "
                "with a model whose template mlx-lm has a tool parser for")
            features[Feature.IMAGES] = unsupported("in-process MLX runs text models only",
                                                   "Use vLLM or SGLang with a vision-language model")
            features[Feature.TOKENIZE] = NATIVE
        else:
            refused = unsupported("mlx_lm.server has no constrained decoding (it silently ignores "
                                  "response_format)", _IN_PROCESS_HINT)
            features.update({f: refused for f in _CONSTRAINTS})
            features[Feature.N] = unsupported("mlx_lm.server ignores n",
                                              "Send n requests, or run MLX in-process (in_process=True)")
            features[Feature.LOGPROBS] = unsupported(
                "mlx_lm.server reports logprobs without the token text and top_logprobs unsorted",
                "Run MLX in-process (in_process=True)")
            features[Feature.LORA_RUNTIME] = unsupported(
                "mlx_lm.server has no adapter endpoints",
                "Pass lora={name: path} to unillm.launch, or run MLX in-process (in_process=True)")
            features[Feature.TOOLS] = NATIVE
            features[Feature.TOOL_CHOICE_AUTO] = Support(
                why="tools go to the chat template; calls are read only when mlx-lm has a tool "
                    "parser for the model's template, otherwise it answers with text (no error)")
            no_choice = unsupported("mlx_lm.server ignores tool_choice", _IN_PROCESS_HINT)
            features[Feature.TOOL_CHOICE_REQUIRED] = features[Feature.TOOL_CHOICE_NAMED] = no_choice
            features[Feature.IMAGES] = Support(
                why="only models mlx-lm has an image processor for; others answer an error")
            features[Feature.TOKENIZE] = unsupported("mlx_lm.server has no tokenize endpoint",
                                                     "Run MLX in-process (in_process=True)")
        features[Feature.EMBEDDINGS] = _NO_EMBEDDINGS
        for f in (Feature.SPEC_NGRAM, Feature.SPEC_EAGLE, Feature.SPEC_MTP):
            features[f] = _DRAFT_ONLY
        for f in (Feature.TENSOR_PARALLEL, Feature.PIPELINE_PARALLEL, Feature.DATA_PARALLEL,
                  Feature.EXPERT_PARALLEL, Feature.MULTI_NODE, Feature.PD_DISAGGREGATION):
            features[f] = _SINGLE_DEVICE
        return Capabilities(engine=self.name, version=version, features=features)

    # -- metrics ---------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """In-process: unillm's own counters. Server mode: refused (mlx_lm.server has no /metrics)."""
        if not is_in_process(version):
            raise UnsupportedFeature(
                self.name, "engine metrics (/metrics)", version=version,
                why="mlx_lm.server has no metrics endpoint",
                alternative="Use the client timings every answer carries (r.timings: ttft_s, itl_s, "
                            "tpot_s), or run MLX in-process (in_process=True), which serves request "
                            "and token counters")
        return MetricNames(
            running="mlx:num_requests_running",  # queued or running: one worker decodes
            spec_accepted_tokens="mlx:spec_decode_num_accepted_tokens_total",
            prompt_tokens="mlx:prompt_tokens_total",
            generation_tokens="mlx:generation_tokens_total",
        )

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"models": HttpCall("GET", "/v1/models"), "version": HttpCall("GET", "/version")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        # mlx_lm.server has no /version (None = server mode); its /v1/models may be an empty body.
        # The in-process engine lists its context limit in /v1/models, as vLLM does (the server has none).
        answer = answers.get("version")
        version = answer.get("version") if isinstance(answer, Mapping) else None
        served = model or self.model_path or DEFAULT_MODEL
        models = answers.get("models")
        data = models.get("data") if isinstance(models, Mapping) else None
        limit = next((m.get("max_model_len") for m in data or () if isinstance(m, Mapping)
                      and m.get("id") == served and isinstance(m.get("max_model_len"), int)), None)
        return EngineInfo(engine=self.name, model=served, version=str(version) if version else None,
                          max_model_len=limit)

    # -- requests --------------------------------------------------------------------------
    def model_field(self, request: Request, info: EngineInfo) -> str:
        """The served model; with a LoRA, the model *path* (the server ignores adapters otherwise)."""
        if request.lora is None or is_in_process(info.version):
            return info.model
        path = self.model_path or (info.model if info.model != DEFAULT_MODEL else None)
        if path is None:
            raise UnsupportedFeature(
                self.name, Feature.LORA.value,
                why="mlx_lm.server applies per-request adapters only with an explicit model path",
                alternative="Pass model=<the server's --model path> to unillm.connect, or use "
                            "unillm.LLM(MLXAdapter(model_path=..., loras={...}), url)")
        return path

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        # Only reached in-process: capabilities refuse constraints in server mode before this.
        key, value = structured_output(output, lark_key="lark")
        return {"structured_outputs": {key: value}}

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        choice = request.tool_choice
        return choice is not None and choice.forces_call and is_in_process(info.version)

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        call = super().build(request, info)
        body = dict(call.json or {})
        if request.logprobs and call.path == COMPLETIONS_PATH:
            body["logprobs"] = True  # mlx validates logprobs as a bool on both routes
            if request.top_logprobs is not None:
                body["top_logprobs"] = request.top_logprobs
        if request.lora is not None:
            body["adapters"] = self._adapter_field(request.lora, info)
        return HttpCall(call.method, call.path, body, call.stream)

    def _adapter_field(self, lora: str, info: EngineInfo) -> str:
        if is_in_process(info.version):
            return lora  # the in-process engine resolves names (and paths) itself
        path = self.loras.get(lora) or (lora if _looks_like_path(lora) else None)
        if path is None:
            known = ", ".join(sorted(self.loras)) or "none"
            raise UnknownLora(
                f"mlx: no LoRA adapter named {lora!r} (known: {known}). mlx_lm.server has no adapter "
                "names: pass lora={name: path} to unillm.launch, or lora=<adapter path>",
                engine=self.name, status=None, engine_message="")
        return path

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        if status == 404 and request is not None and request.lora is not None:
            return UnknownLora(
                f"mlx answered 404: {message}. Name adapters at launch (lora={{name: path}}; in-process "
                "also llm.loras.load(name, path)); mlx_lm.server needs mlx-lm's layout "
                "(unillm_mlx.convert_peft_adapter converts PEFT adapters)",
                engine=self.name, status=status, engine_message=message)
        return error_for_status(self.name, status, message, request)

    def lora_error(self, status: int, body: bytes, info: EngineInfo | None) -> UnillmError:
        if info is None or not is_in_process(info.version):
            return UnsupportedFeature(
                self.name, Feature.LORA_RUNTIME.value, version=info.version if info else None,
                why="mlx_lm.server has no adapter endpoints",
                alternative="Pass lora={name: path} to unillm.launch, or run MLX in-process")
        return self.parse_error(status, body, None, info)

    # -- launch ----------------------------------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        if sys.platform == "darwin":
            mlx = f"mlx=={MLX_VERSION}"  # Metal is built in on Apple Silicon
        else:
            mlx = f"mlx[{'cuda' if gpu else 'cpu'}]=={MLX_VERSION}"
        return EngineInstall(packages=(mlx, f"mlx-lm=={MLX_LM_VERSION}", GRAMMAR_ENGINE))

    def command(self, spec: LaunchSpec) -> LaunchCommand:
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
            argv += ["--draft-model", spec.speculative.draft_model,
                     "--num-draft-tokens", str(spec.speculative.num_tokens)]
            no_prompt_cache = True  # with a draft model, a prompt-cache hit gives wrong greedy output
        if no_prompt_cache:
            argv += ["--prompt-cache-size", "0"]
        env: dict[str, str] = {}
        if _looks_like_path(spec.model):
            # A local model needs no hub: offline keeps unknown-model errors fast, and an existing
            # HF_HUB_CACHE keeps /v1/models from answering an empty body. spec.env overrides both.
            env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": spec.model}
        argv += spec.extra_args
        return LaunchCommand(argv=argv, env=env, health_path="/health")

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """mlx-lm on a CPU (``mlx[cpu]``, the build ``unillm setup mlx`` picks without a GPU).

        MLX needs no memory settings; the recipe keeps a local model off the hub (mlx_lm.server
        lists ``HF_HUB_CACHE`` in /v1/models, so it points at an empty folder in ``workdir``),
        turns the unneeded API key off (mlx_lm.server has no authentication) and, in server mode,
        converts PEFT LoRA adapters to mlx-lm's layout in ``workdir`` before launching.
        """
        from unillm_mlx.peft import with_mlx_loras

        hub = workdir / "hf-hub"
        env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub)} if _looks_like_path(spec.model) else {}
        return CpuRecipe(settings={"api_key": None, "env": env}, dirs=(hub,),
                         prepare=partial(with_mlx_loras, workdir=workdir))

    def expected_version(self, spec: LaunchSpec) -> str | None:
        """In-process mode reports ``<mlx-lm version>+in-process``; a server reports none."""
        return MLX_LM_VERSION + IN_PROCESS_SUFFIX if spec.in_process else None

    def in_process(self, spec: LaunchSpec) -> httpx.AsyncBaseTransport:
        """mlx-lm inside this process, answering this adapter's HTTP API (needs unillm-mlx[inprocess])."""
        try:
            from unillm_mlx.inprocess import InProcessTransport
        except ImportError as e:
            raise UnsupportedFeature(
                self.name, "in-process mode", why=f"mlx-lm is not importable here ({e})",
                alternative="pip install 'unillm-mlx[inprocess]'") from None
        return InProcessTransport(spec)


def refuse_unsupported(spec: LaunchSpec, *, in_process: bool = False) -> None:
    """Raise UnsupportedFeature for launch settings mlx-lm (server or in-process) cannot honour."""

    def no(setting: str, why: str, alternative: str = "") -> UnsupportedFeature:
        return UnsupportedFeature("mlx", setting, why=why, alternative=alternative)

    if spec.task == "embed":
        raise no('task="embed"', _NO_EMBEDDINGS.why, _NO_EMBEDDINGS.alternative)
    p = spec.parallel
    if p.tensor > 1 or p.pipeline > 1 or p.data > 1 or p.expert:
        raise no("parallel", "mlx-lm runs one model on one device",
                 "Drop parallel=, or use vLLM / SGLang")
    if spec.speculative is not None and spec.speculative.method != "draft":
        raise no(f"speculative method {spec.speculative.method!r}",
                 "mlx-lm only speculates with a draft model", _DRAFT_ONLY.alternative)
    unsupported_settings = {
        "dtype": "mlx-lm uses the dtype stored in the model",
        "memory_fraction": "mlx-lm has no memory-fraction setting",
        "quantization": "mlx-lm quantizes when converting, not at launch "
                        "(mlx_lm.convert --hf-path ... -q), then launch the converted folder",
        "max_lora_rank": "mlx-lm reads the rank from each adapter's config",
    }
    if not in_process:  # the in-process engine honours these itself
        unsupported_settings.update({
            "served_name": "mlx_lm.server serves the model under its path (or 'default_model')",
            "max_model_len": "mlx_lm.server has no context-length setting",
            "max_loras": "mlx_lm.server loads one adapter at a time (switching reloads the model)",
        })
    for setting, why in unsupported_settings.items():
        if getattr(spec, setting) is not None:
            raise no(setting, why, f"Drop {setting}=")
    if in_process:
        if spec.prefix_caching:
            raise no("prefix_caching", "the in-process engine keeps no prompt cache", "Drop prefix_caching=")
        return
    if spec.runtime_lora:
        raise no("runtime_lora", "mlx_lm.server has no adapter endpoints",
                 "Pass lora={name: path} at launch, or run MLX in-process (in_process=True)")
    key = spec.key()
    if key and not _is_loopback(spec.host):
        raise no("api_key", "mlx_lm.server has no authentication, so the key would not protect "
                 f"{spec.host}", "Bind 127.0.0.1, or put an authenticating proxy in front")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~"))
