"""Probe findings as refusals: an option an engine version accepts and then ignores is refused.

``unillm probe`` measures options by their effect; when one is sent, accepted and has no effect
(a silent drop), record it on the adapter so the next request is refused before sending::

    class MyAdapter(Adapter):
        ignored = (
            Ignored(Feature.SEED, through="0.4.2", evidence="the same seed gave 3 texts in 3",
                    fixed_in="0.4.3"),
        )

Every adapter's ``capabilities(version)`` then answers ``level="no"`` for that feature at any
version up to ``through`` (inclusive; ``through=None``: every version so far), with the evidence
in the refusal. An unknown version counts as the newest, so it is refused only when
``through`` is None.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from unillm.adapter.versions import parse_version
from unillm.capabilities import Capabilities, Feature, unsupported

__all__ = ["Ignored", "refuse_ignored"]


@dataclass(frozen=True)
class Ignored:
    """A silent drop measured by ``unillm probe``: ``feature`` has no effect on the engine up to
    version ``through``.

    Args:
        feature: The feature the engine accepts and ignores.
        through: The newest version measured to ignore it (inclusive); None: every version so far.
        evidence: What the probe measured (shown in the refusal).
        fixed_in: The first version that honours it, when known (the refusal suggests upgrading).
    """

    feature: Feature
    through: str | None
    evidence: str
    fixed_in: str | None = None

    def applies(self, version: str | None) -> bool:
        """Whether ``version`` (None: unknown, taken as the newest) is one that ignores it.

        Args:
            version: The engine's version string.
        """
        if self.through is None:
            return True
        v, last = parse_version(version), parse_version(self.through)
        return v is not None and last is not None and v <= last


def refuse_ignored(capabilities: Capabilities, findings: Iterable[Ignored]) -> Capabilities:
    """``capabilities`` with every feature a finding covers at its version refused.

    Args:
        capabilities: An adapter's capabilities at one version.
        findings: The adapter's recorded probe findings.

    Returns:
        The same capabilities, or a copy where each covered feature is ``level="no"``.
    """
    refused = {}
    for finding in findings:
        if not finding.applies(capabilities.version):
            continue
        upto = f"<= {finding.through}" if finding.through else "(every version so far)"
        refused[finding.feature] = unsupported(
            f"{capabilities.engine} {upto} accepts it and ignores it (measured by unillm probe: "
            f"{finding.evidence})",
            f"Upgrade {capabilities.engine} to {finding.fixed_in} or newer"
            if finding.fixed_in
            else "Leave the option out, or check a newer engine with `unillm probe`",
        )
    if not refused:
        return capabilities
    return capabilities.model_copy(update={"features": {**capabilities.features, **refused}})
