"""Parse unillm's router commands with the router's own argument parser and configuration.

Runs INSIDE a router's managed env (``unillm setup vllm-router`` / ``unillm setup smg``), so it
imports the router itself; nothing listens. The first argument names the router. Checks (through
:mod:`unillm.testing.verdicts`) ``{"name": {"argv": [...], "expect": {attr: value}}}`` as JSON on
stdin (argv after ``-m <module>``) and prints ``{"name": "ok" | "<why it was rejected>"}``.

Each argv goes through the launcher's ``parse_router_args`` (argparse with the router's choices),
its ``_validate_router_args``, and ``Router.from_args``, which builds the Rust core's router
configuration (policies, PD workers) without starting it. ``expect`` keys are ``RouterArgs``
attributes.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def check(router: str, case: dict[str, Any]) -> None:
    package = {"vllm-router": "vllm_router", "smg": "smg"}[router]
    launcher = import_module(f"{package}.launch_router")
    args = launcher.parse_router_args(case["argv"])
    args._validate_router_args()
    for attr, want in case.get("expect", {}).items():
        got = getattr(args, attr)
        if got != want and str(got) != str(want):
            raise ValueError(f"{attr}={got!r}, expected {want!r}")
    import_module(f"{package}.router").Router.from_args(args)
