"""Ray launches without a cluster: the placement plan, the settings' checks, the typed errors, the
rendered Ray executor, the config table, the CLI flag and the env add-on that brings Ray to vLLM.

tests/integration/test_ray_cluster.py runs a real two-node cluster.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import unillm
from unillm.adapter.base import EngineInstall
from unillm.cli.main import main
from unillm.config.check import check_config
from unillm.errors import ConfigError, InvalidOptions, LaunchError, UnsupportedFeature
from unillm.launching import envs
from unillm.launching.ray_cluster import RayLaunch, import_ray, unplaceable
from unillm.launching.ray_plan import Ray, RayPlan, ray_plan, replica_bundle
from unillm.launching.ray_replica import ReplicaFailed, ReplicaReady

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PY = "/usr/bin/python3"
ROOT = Path(__file__).resolve().parent.parent


def spec(**settings: object) -> unillm.LaunchSpec:
    return unillm.LaunchSpec(model="m", python=PY, **settings)


# -- the plan --------------------------------------------------------------------------------


def test_a_cpu_replica_reserves_a_cpu_per_device_of_its_layout() -> None:
    assert replica_bundle(spec(cpu=True, parallel=unillm.Parallel(pipeline=2)), Ray()) == {"CPU": 2.0}


def test_a_gpu_replica_reserves_its_layouts_gpus_and_one_cpu() -> None:
    assert replica_bundle(spec(parallel=unillm.Parallel(tensor=2)), Ray()) == {"CPU": 1.0, "GPU": 2.0}


def test_on_a_cluster_without_gpus_a_replica_reserves_a_cpu_per_device() -> None:
    bundle = replica_bundle(spec(parallel=unillm.Parallel(tensor=2)), Ray(), cluster_gpus=False)
    assert bundle == {"CPU": 2.0}


def test_ray_settings_override_the_layouts_resources() -> None:
    assert replica_bundle(spec(), Ray(cpus=4, gpus=0)) == {"CPU": 4.0}


def test_the_plan_has_one_bundle_and_one_named_actor_per_replica() -> None:
    plan = ray_plan(
        "vllm", spec(cpu=True), replicas=2, cluster=Ray(placement="STRICT_SPREAD"), run="r1", executor=False
    )
    assert plan == RayPlan(
        bundles=({"CPU": 1.0}, {"CPU": 1.0}),
        strategy="STRICT_SPREAD",
        names=("unillm-vllm-r1-0", "unillm-vllm-r1-1"),
        engine_executor=False,
    )


def test_an_engine_executor_plan_reserves_nothing_itself() -> None:
    plan = ray_plan("vllm", spec(), replicas=1, cluster=Ray(), run="r1", executor=True)
    assert plan.bundles == ()


@pytest.mark.parametrize("setting", [{"in_process": True}, {"nodes": unillm.Nodes(count=2, head="h")}])
def test_the_plan_refuses_settings_for_one_local_engine(setting: dict[str, object]) -> None:
    with pytest.raises(InvalidOptions, match="Ray launch"):
        ray_plan("vllm", spec(**setting), replicas=1, cluster=Ray(), run="r", executor=False)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"address": " "}, "needs the cluster's address"),
        ({"placement": "EVERYWHERE"}, "STRICT_SPREAD"),
        ({"cpus": -1}, "at least 0"),
        ({"placement_timeout": 0}, "above 0"),
    ],
)
def test_ray_settings_are_checked(settings: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptions, match=message):
        Ray(**settings)  # type: ignore[arg-type]


def test_a_plan_needing_more_gpus_than_the_cluster_has_is_named() -> None:
    plan = ray_plan("vllm", spec(), replicas=2, cluster=Ray(), run="r", executor=False)
    assert "0 GPU in all and 2 replica(s) need 2" in str(unplaceable(plan, {"CPU": 8.0}))


def test_a_plan_within_the_clusters_totals_is_placeable() -> None:
    plan = ray_plan("vllm", spec(cpu=True), replicas=2, cluster=Ray(), run="r", executor=False)
    assert unplaceable(plan, {"CPU": 2.0}) is None


# -- launch() and its errors ------------------------------------------------------------------


def test_launch_with_a_cluster_gives_a_ray_launch() -> None:
    run = unillm.launch("vllm", model="m", python=PY, replicas=2, cluster=Ray("h:6379"))
    assert isinstance(run, RayLaunch) and len(run.actor_names) == 2


def test_a_ray_launch_shares_one_generated_key_between_replicas() -> None:
    run = unillm.launch("vllm", model="m", python=PY, replicas=2, cluster=Ray("h:6379"))
    assert run.spec.key() is not None


def test_a_ray_launch_refuses_a_router() -> None:
    with pytest.raises(InvalidOptions, match="client-side routing"):
        unillm.launch("vllm", model="m", python=PY, replicas=2, router="smg", cluster=Ray("h:6379"))


def test_missing_ray_is_a_typed_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UnsupportedFeature, match=r"unillm-sdk\[ray\]"):
        import_ray()


def test_import_and_ray_launch_setup_load_no_ray() -> None:
    code = (
        "import sys, unillm; unillm.launch('vllm', model='m', python='/usr/bin/python3', "
        "cluster=unillm.Ray('h:1')); print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_replicas_launch_failure_is_raised_as_the_supervisors_error_naming_node() -> None:
    run = unillm.launch("vllm", model="m", python=PY, cluster=Ray("h:6379"))
    failed = ReplicaFailed(LaunchError("vllm exited with code 1", command="c", log_tail=["boom"]), "10.0.0.2")
    with pytest.raises(LaunchError, match=r"unillm-vllm-\w+-0 on node 10.0.0.2: vllm exited") as caught:
        run._started([failed])
    assert caught.value.log_tail == ["boom"]


def test_an_actor_that_died_while_starting_is_a_launch_error() -> None:
    run = unillm.launch("vllm", model="m", python=PY, cluster=Ray("h:6379"))
    with pytest.raises(LaunchError, match="died before its engine was ready: node lost"):
        run._started([RuntimeError("node lost")])


def test_a_replica_still_starting_at_the_deadline_is_a_launch_error() -> None:
    run = unillm.launch("vllm", model="m", python=PY, replicas=2, cluster=Ray("h:6379"))
    ready = ReplicaReady("http://a:1", "n", "a", 1, "/log", run.spec, None)
    with pytest.raises(LaunchError, match="1 of 2 replicas were not ready"):
        run._started([ready, None])


def test_a_launch_error_survives_pickling_whole() -> None:
    error = LaunchError("m", command="c", log_tail=["t"], error_lines=["e"], causes=["why"])
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.causes, again.log_tail) == (str(error), ["why"], ["t"])


# -- the engine's Ray executor ----------------------------------------------------------------


def test_a_multi_device_layout_on_ray_uses_vllms_ray_executor() -> None:
    run = unillm.launch(
        "vllm", model="m", python=PY, parallel=unillm.Parallel(pipeline=2), cluster=Ray("h:6379")
    )
    argv = " ".join(run.commands()[0][1].argv)
    assert (
        run.plan.engine_executor and "--pipeline-parallel-size 2 --distributed-executor-backend ray" in argv
    )


def test_vllms_ray_executor_joins_the_cluster_on_the_engines_interpreter() -> None:
    env = unillm.launch("vllm", model="m", python=PY, ray_address="h:6379").command().env
    job = json.loads(env["RAY_JOB_CONFIG_JSON_ENV_VAR"])
    assert (env["RAY_ADDRESS"], job["runtime_env"]["py_executable"]) == ("h:6379", PY)


def test_vllms_ray_executor_on_cpu_is_refused_before_the_cluster_is_touched() -> None:
    with pytest.raises(UnsupportedFeature, match="current platform cpu does not support ray"):
        unillm.launch(
            "vllm", model="m", python=PY, cpu=True, parallel=unillm.Parallel(pipeline=2), cluster=Ray()
        )


def test_an_engine_without_a_ray_executor_refuses_ray_address() -> None:
    with pytest.raises(UnsupportedFeature, match="no Ray executor"):
        unillm.launch("llamacpp", model="m", python=PY, ray_address="h:6379")


# -- config and CLI -------------------------------------------------------------------------


def ray_config(**cluster: object) -> dict[str, object]:
    table = {"kind": "ray", "address": "h:6379", **cluster}
    return {"engine": "vllm", "launch": {"model": "m", "python": PY, "replicas": 2, "cluster": table}}


def test_a_launch_cluster_table_gives_a_ray_launch_with_its_settings() -> None:
    run = unillm.from_config(ray_config(placement="STRICT_SPREAD"), env={})
    assert isinstance(run, RayLaunch) and run.cluster == Ray("h:6379", placement="STRICT_SPREAD")


def test_launch_replicas_without_a_cluster_give_a_local_fleet_launch_with_its_policy() -> None:
    config = {"engine": "vllm", "policy": "prefix", "launch": {"model": "m", "python": PY, "replicas": 2}}
    run = unillm.from_config(config, env={})
    assert isinstance(run, unillm.FleetLaunch) and (len(run.engines), run.policy) == (2, "prefix")


def test_a_cluster_table_of_an_unknown_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="the kinds are 'ray'"):
        unillm.from_config(ray_config(kind="slurm"), env={})


def test_an_unknown_cluster_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown keys adress"):
        unillm.from_config(ray_config(adress="x"), env={})


def test_check_config_names_a_bad_cluster_table() -> None:
    found = check_config(ray_config(cpus=-2), env={})
    assert [p.setting for p in found.problems] == ["launch.cluster"]


def test_cli_ray_flag_renders_one_command_per_ray_actor(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "launch",
        "vllm",
        "--model",
        "M",
        "--python",
        PY,
        "--replicas",
        "2",
        "--ray",
        "h:6379",
        "--dry-run",
    ]
    assert main(argv) == 0
    labels = [line for line in capsys.readouterr().out.splitlines() if "Ray actor" in line]
    assert len(labels) == 2


# -- Ray in vLLM's env ----------------------------------------------------------------------


def test_vllms_env_gets_the_ray_version_of_the_ray_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = extras["ray"]
    assert (
        pin in envs.install_plan("vllm", gpu=False).add_ons
        and pin in envs.install_plan("vllm", gpu=True).add_ons
    )


def _record(monkeypatch: pytest.MonkeyPatch, installer: str = "pip") -> list[list[str]]:
    """The commands setup would run (none runs), with ``installer`` forced."""
    monkeypatch.setenv("UNILLM_INSTALLER", installer)
    calls: list[list[str]] = []
    monkeypatch.setattr(envs, "_run", lambda argv, env=None: calls.append(argv))
    return calls


def test_add_ons_already_installed_install_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record(monkeypatch)
    assert (envs.add_missing(Path(sys.executable), ["pytest"], log=lambda _: None), calls) == ([], [])


def test_a_missing_or_other_version_add_on_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record(monkeypatch)
    wanted = ["pytest==0.0.1", "surely-not-installed-here"]
    assert envs.add_missing(Path(sys.executable), wanted, log=lambda _: None) == wanted
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", *wanted]]


def test_setup_adds_a_missing_add_on_to_an_env_built_before_without_rebuilding(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    plan = EngineInstall(packages=("engine==1",), add_ons=("surely-not-installed-here",))
    monkeypatch.setattr(envs, "install_plan", lambda name, gpu: plan)
    venv = envs.env_dir("fake")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    marker = json.dumps({"packages": ["engine==1"], "remove": [], "pip_args": []}, sort_keys=True)
    (venv / "unillm-install.json").write_text(marker)  # what an older unillm wrote: no add-ons
    calls = _record(monkeypatch)
    envs.setup_engine("fake", gpu=False, log=lambda _: None)
    assert calls == [
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "surely-not-installed-here"]
    ]


# -- a replica's trouble, as the fleet's errors explain it -------------------------------------


class _Timeout(Exception):
    pass


class _FakeRay:
    """The two calls ``RayLaunch.trouble`` makes, answering ``outcome`` (raised if an exception)."""

    class exceptions:  # as ray.exceptions is spelled
        GetTimeoutError = _Timeout

    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def get(self, ref: object, timeout: float) -> object:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class _Actor:
    class trouble:  # an actor method handle
        @staticmethod
        def remote() -> object:
            return object()


def _started_launch(outcome: object) -> RayLaunch:
    run = unillm.launch("vllm", model="m", python=PY, cluster=Ray("h:6379"))
    run._ray = _FakeRay(outcome)  # type: ignore[assignment]
    run._actors = [_Actor()]
    run.ready = [
        ReplicaReady("http://10.0.0.2:8000", "abcdef0123456789", "10.0.0.2", 7, "/log", run.spec, None)
    ]
    return run


def test_a_replica_whose_actor_died_is_explained_with_its_node() -> None:
    run = _started_launch(RuntimeError("The actor died unexpectedly\ntraceback"))
    expected = f"the Ray actor {run.actor_names[0]} on node 10.0.0.2 (abcdef012345) holding the engine died"
    assert run.trouble(0) == f"{expected}: The actor died unexpectedly"


def test_a_replica_whose_engine_exited_is_explained_by_its_supervisor() -> None:
    assert (
        _started_launch("vllm exited with code 1").trouble(0) == "vllm exited with code 1 (on node 10.0.0.2)"
    )


def test_a_replica_whose_actor_does_not_answer_says_so() -> None:
    assert "did not answer within 5s" in str(_started_launch(_Timeout()).trouble(0))


def test_a_healthy_replica_has_no_trouble() -> None:
    assert _started_launch(None).trouble(0) is None
