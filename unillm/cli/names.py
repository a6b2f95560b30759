"""The engine names the help text lists: the installed adapters' (read, never typed)."""

from __future__ import annotations


def engine_names(conjunction: str = "and") -> str:
    """The installed engines as prose, e.g. ``"vllm, sglang or tgi"`` (their entry-point names).

    Args:
        conjunction: The word before the last name ("and", "or").

    Returns:
        The names, or a hint to install an adapter when none is installed.
    """
    from unillm.adapter.registry import installed_engines

    names = installed_engines()
    if not names:
        return "an engine name (no adapter installed: pip install 'unillm-sdk[vllm]')"
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"
