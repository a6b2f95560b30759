"""Semantic routes in ``unillm.toml``: a ``[router]`` table beside the engine settings.

    engine = "vllm"
    base_url = "http://127.0.0.1:8000"      # the main target

    [router]
    default = "chitchat"
    [router.embedder]                       # one of: engine + base_url | url | azure_endpoint
    engine = "vllm"
    base_url = "http://127.0.0.1:8001"
    [[router.routes]]
    name = "code"
    utterances = ["How do I fix this Python error?"]
    target = "coder"                        # a [router.targets.<name>] entry (LLM or fleet)
    [router.targets.coder]
    engine = "vllm"
    base_url = "http://10.0.0.5:8000"

``unillm.from_config("unillm.toml")`` then returns a :class:`SemanticRouter`;
:func:`router_from_config` builds one with a main ``llm`` of your own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from unillm.errors import ConfigError, validation_problems
from unillm.semantic.embedders import Embedder, EngineEmbedder, OpenAIEmbedder
from unillm.semantic.router import SemanticRouter
from unillm.semantic.routes import EmbeddingSignal, KeywordSignal, Route
from unillm.semantic.scoring import Scoring


class EmbedderConfig(BaseModel):
    """Where embeddings come from: a unillm engine, an OpenAI-compatible URL, or Azure OpenAI."""

    model_config = ConfigDict(extra="forbid")

    engine: str | None = None
    base_url: str | None = None
    url: str | None = None
    azure_endpoint: str | None = None
    deployment: str | None = None
    api_version: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    auth: Literal["bearer", "api-key"] | None = None
    dimensions: int | None = Field(None, ge=1)
    batch_size: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> EmbedderConfig:
        sources = [k for k in ("engine", "url", "azure_endpoint") if getattr(self, k)]
        if len(sources) != 1:
            raise ValueError(
                f"give exactly one of engine (+ base_url), url, or azure_endpoint (got {sources or 'none'})"
            )
        if self.engine and not self.base_url:
            raise ValueError("engine embedders need base_url")
        if self.azure_endpoint and not (self.deployment and self.api_version):
            raise ValueError("azure_endpoint needs deployment and api_version")
        return self

    def key(self, env: Mapping[str, str]) -> str | None:
        """The API key: ``api_key``, else the ``api_key_env`` variable."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            value = env.get(self.api_key_env)
            if not value:
                raise ConfigError(f"[router.embedder] api_key_env={self.api_key_env!r} is not set")
            return value
        return None

    def build(self, env: Mapping[str, str]) -> Embedder:
        """The embedder this table describes (nothing is sent yet)."""
        key = self.key(env)
        if self.engine:
            from unillm.api import connect

            assert self.base_url is not None
            return EngineEmbedder(connect(self.engine, self.base_url, model=self.model, api_key=key))
        if self.azure_endpoint:
            assert self.deployment and self.api_version
            return OpenAIEmbedder.azure(
                self.azure_endpoint,
                deployment=self.deployment,
                api_version=self.api_version,
                api_key=key,
                auth=self.auth or "api-key",
                dimensions=self.dimensions,
                batch_size=self.batch_size,
            )
        assert self.url is not None
        return OpenAIEmbedder(
            self.url,
            model=self.model,
            api_key=key,
            auth=self.auth or "bearer",
            api_version=self.api_version,
            dimensions=self.dimensions,
            batch_size=self.batch_size,
        )


class TargetConfig(BaseModel):
    """Another engine (or fleet: a list of URLs) that routes can send requests to."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    base_url: str | list[str]
    model: str | None = None
    api_key: SecretStr | None = None


class RouterConfig(BaseModel):
    """The ``[router]`` table."""

    model_config = ConfigDict(extra="forbid")

    routes: list[Route] = Field(min_length=1)
    signals: list[KeywordSignal | EmbeddingSignal] = []
    default: str | None = None
    text: Literal["last_user", "user", "all"] = "last_user"
    on_embedder_error: Literal["default", "raise"] = "raise"
    scoring: Scoring = Scoring()  # [router.scoring]: what router.calibrate() chose
    embedder: EmbedderConfig
    targets: dict[str, TargetConfig] = {}


def parse_router_config(data: Mapping[str, Any]) -> RouterConfig:
    """Validate a ``[router]`` table, with readable errors."""
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as e:
        problems = validation_problems(e, "(router)")
        if any(x["loc"] == ("embedder",) and x["type"] == "missing" for x in e.errors()):
            problems += (
                ". Add a [router.embedder] table saying where vectors come from: "
                'url = "http://host:port/v1" (any OpenAI-compatible /v1/embeddings), '
                'engine = "vllm" + base_url = "..." (an engine serving an embedding '
                "model), or azure_endpoint + deployment + api_version"
            )
        raise ConfigError(f"invalid [router]: {problems}") from None


def build_router(
    data: Mapping[str, Any], *, llm: Any = None, env: Mapping[str, str] | None = None
) -> SemanticRouter:
    """A SemanticRouter from a ``[router]`` table; ``llm`` is the main target (LLM, Fleet or Launch)."""
    from unillm.api import connect
    from unillm.errors import InvalidOptions
    from unillm.semantic.routes import RouteSet

    config = parse_router_config(data)
    env = os.environ if env is None else env
    try:
        routes = RouteSet(routes=tuple(config.routes), signals=tuple(config.signals), default=config.default)
    except ValidationError as e:
        raise ConfigError(f"invalid [router] routes: {e.errors()[0]['msg']}") from None
    targets = {
        name: connect(
            t.engine, t.base_url, model=t.model, api_key=t.api_key.get_secret_value() if t.api_key else None
        )
        for name, t in config.targets.items()
    }
    try:
        return SemanticRouter(
            routes,
            embedder=config.embedder.build(env),
            llm=llm,
            targets=targets,
            text=config.text,
            on_embedder_error=config.on_embedder_error,
            scoring=config.scoring,
        )
    except InvalidOptions as e:
        raise ConfigError(f"invalid [router]: {e}") from None


def router_from_config(
    source: str | Path | Mapping[str, Any], *, llm: Any = None, env: Mapping[str, str] | None = None
) -> SemanticRouter:
    """A SemanticRouter from the ``[router]`` table of a config file or mapping.

    router = router_from_config("unillm.toml", llm=unillm.connect("vllm", url))
    """
    from unillm.config.files import read_config_file

    data = dict(source) if isinstance(source, Mapping) else read_config_file(Path(source))
    if not isinstance(data.get("router"), Mapping):
        raise ConfigError("the config has no [router] table")
    return build_router(data["router"], llm=llm, env=env)
