"""The models the worker runs: the base model, its draft, and LoRA adapters loaded on demand.

Loading happens on the worker thread; the LoRA names may be read and changed from the event loop.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unillm.adapter import LaunchSpec
from unillm_mlx.inprocess.parsing import RequestError

__all__ = ["DEFAULT_MAX_LORAS", "Draft", "ModelStore"]

DEFAULT_MAX_LORAS = 2  # adapter models kept loaded besides the base model


@dataclass(frozen=True)
class Draft:
    """The draft model of speculative decoding, and how many tokens it proposes at a time."""

    model: Any
    num_tokens: int


class ModelStore:
    """Loaded models by adapter path (None: the base model), the most recently used last.

    Args:
        spec: The launch settings (model, draft, LoRAs named at launch, how many to keep loaded).
    """

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.draft: Draft | None = None
        self._loras: dict[str, str] = dict(spec.lora)
        self._max_loras = spec.max_loras or DEFAULT_MAX_LORAS
        self._lock = threading.Lock()  # guards _loras against the worker
        self._models: dict[str | None, tuple[Any, Any]] = {}  # adapter path -> (model, tokenizer)
        self._lltokenizer: Any = None
        self._tmp = Path(tempfile.mkdtemp(prefix="unillm-mlx-"))
        self._load_error: str | None = None

    # -- LoRA names, on the event loop ---------------------------------------------------------
    def loras(self) -> dict[str, str]:
        """The LoRA adapters by name: their paths."""
        with self._lock:
            return dict(self._loras)

    def add_lora(self, name: str, path: str) -> None:
        """Name the adapter at ``path`` (loaded when first used).

        Raises:
            RequestError: No adapter at ``path``, or the name is taken.
        """
        if not (Path(path).expanduser() / "adapter_config.json").is_file():
            raise RequestError(404, f"no LoRA adapter at {path!r} (adapter_config.json is missing)")
        with self._lock:
            if name in self._loras:
                raise RequestError(400, f"a LoRA adapter named {name!r} is already loaded")
            self._loras[name] = path

    def remove_lora(self, name: str) -> None:
        """Forget the adapter named ``name`` (a RequestError if there is none)."""
        with self._lock:
            if self._loras.pop(name, None) is None:
                raise RequestError(404, f"no LoRA adapter named {name!r} is loaded")

    # -- on the worker thread ------------------------------------------------------------------
    def load_base(self) -> None:
        """Load the base model and the draft model (a failure is kept, and reported per request)."""
        from mlx_lm import load

        try:
            model, tokenizer, *_ = load(self.spec.model)
            self._models[None] = (model, tokenizer)
            s = self.spec.speculative
            if s is not None and s.draft_model:
                draft, *_ = load(s.draft_model)
                self.draft = Draft(draft, s.num_tokens)
        except Exception as e:
            self._load_error = f"could not load the model {self.spec.model!r}: {type(e).__name__}: {e}"

    def model_for(self, adapter: str | None) -> tuple[Any, Any]:
        """The model and tokenizer for ``adapter`` (a LoRA name or path; None: the base model).

        Raises:
            RequestError: The base model failed to load, or the adapter is unknown or broken.
        """
        if self._load_error is not None:
            raise RequestError(404, self._load_error)
        if adapter is None:
            return self._models[None]
        with self._lock:
            path = self._loras.get(adapter)
        if path is None:
            if not adapter.startswith(("/", "./", "../", "~")):
                raise RequestError(404, f"no LoRA adapter named {adapter!r} is loaded")
            path = adapter
        resolved = str(Path(path).expanduser().resolve())
        if resolved not in self._models:
            self._models[resolved] = self._load_adapter(adapter, resolved)
            loaded = [k for k in self._models if k is not None]
            for old in loaded[: -self._max_loras]:
                del self._models[old]
        else:
            self._models[resolved] = self._models.pop(resolved)  # most recently used last
        return self._models[resolved]

    def grammar_tokenizer(self, model: Any, tokenizer: Any) -> Any:
        """llguidance's tokenizer for the model's vocabulary (made once)."""
        if self._lltokenizer is None:
            from unillm_mlx.grammar import tokenizer_for

            vocab = getattr(getattr(model, "args", None), "vocab_size", None) or len(tokenizer.vocab)
            self._lltokenizer = tokenizer_for(tokenizer, int(vocab))
        return self._lltokenizer

    def close(self) -> None:
        """Drop the models and the converted adapters."""
        self._models.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _load_adapter(self, name: str, path: str) -> tuple[Any, Any]:
        from mlx_lm import load

        from unillm_mlx.peft import convert_peft_adapter, is_peft_adapter

        if not (Path(path) / "adapter_config.json").is_file():
            raise RequestError(404, f"LoRA adapter {name!r}: no adapter_config.json in {path}")
        try:
            if is_peft_adapter(path):
                path = str(convert_peft_adapter(path, self._tmp / uuid.uuid4().hex))
            model, tokenizer, *_ = load(self.spec.model, adapter_path=path)
        except Exception as e:
            raise RequestError(404, f"LoRA adapter {name!r} could not be loaded: {e}") from None
        return model, tokenizer
