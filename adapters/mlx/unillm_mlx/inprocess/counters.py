"""The in-process engine's Prometheus counters (``mlx:<name>_total``) and its running-requests gauge."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["Counters"]


def _counter(help_text: str) -> int:
    return field(default=0, metadata={"help": help_text})


@dataclass
class Counters:
    """Totals since launch (written by the worker thread only)."""

    requests: int = _counter("Requests started.")
    prompt_tokens: int = _counter("Prompt tokens processed.")
    generation_tokens: int = _counter("Tokens generated.")
    spec_decode_num_accepted_tokens: int = _counter("Generated tokens that came from the draft model.")

    def prometheus(self, running: int) -> str:
        """Prometheus text: these counters, and ``running`` requests queued or running."""
        lines = []
        for f in fields(self):
            lines += [
                f"# HELP mlx:{f.name} {f.metadata['help']}",
                f"# TYPE mlx:{f.name} counter",
                f"mlx:{f.name}_total {getattr(self, f.name)}",
            ]
        lines += [
            "# HELP mlx:num_requests_running Requests queued or running.",
            "# TYPE mlx:num_requests_running gauge",
            f"mlx:num_requests_running {running}",
        ]
        return "\n".join(lines) + "\n"
