"""``unillm deploy kubernetes``: a unillm config rendered as a KServe LLMInferenceService.

Each setting's rendering, the check against the vendored CRD schema (it passes what we render
and bites on what is broken), the refusals, and the command line end to end (files, stdout,
kubectl through a recording stand-in on PATH). No engine and no cluster needed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from docs_blocks import DOCS, blocks

import unillm
from unillm.cli.main import main
from unillm.config.load import load_config
from unillm.deploy import (
    Kubectl,
    KubectlError,
    read_deployment,
    render_kserve,
    validate_manifest,
    write_manifests,
)
from unillm.deploy.crd_schema import schema_for
from unillm.deploy.output import dump
from unillm.errors import ConfigError, InvalidOptions, UnsupportedFeature

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TWO = {"replicas": 2}  # a policy routes between replicas


def render(launch: dict[str, Any] | None = None, kubernetes: dict[str, Any] | None = None, **top: Any) -> Any:
    """The one manifest rendered from a config of ``[launch]``, ``[deploy.kubernetes]`` and top-level keys."""
    config: dict[str, Any] = {"engine": "vllm", "launch": {"model": MODEL, **(launch or {})}, **top}
    if kubernetes is not None:
        config["deploy"] = {"kubernetes": kubernetes}
    (manifest,) = render_kserve(read_deployment(config, env={}))
    return manifest


def main_container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["template"]["containers"]
    assert container["name"] == "main"
    return dict(container)


def engine_args(workload: dict[str, Any]) -> list[str]:
    """The container's args as the engine gets them (KServe's template runs them through eval)."""
    return shlex.split(" ".join(main_container(workload).get("args", [])))


def env_of(workload: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main_container(workload).get("env", [])}


# -- the resource and the model ---------------------------------------------------------------


def test_a_hub_model_is_an_hf_uri_served_under_its_id() -> None:
    manifest = render()
    assert manifest["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert manifest["kind"] == "LLMInferenceService"
    assert manifest["spec"]["model"] == {"uri": f"hf://{MODEL}", "name": MODEL}
    assert manifest["metadata"]["name"] == "qwen2-5-7b-instruct"


def test_served_name_names_the_model_and_the_resource() -> None:
    manifest = render({"served_name": "Chat_Model"})
    assert manifest["spec"]["model"]["name"] == "Chat_Model"
    assert manifest["metadata"]["name"] == "chat-model"


def test_name_and_namespace_come_from_deploy_kubernetes() -> None:
    manifest = render(kubernetes={"name": "qwen", "namespace": "llm"})
    assert manifest["metadata"]["name"] == "qwen"
    assert manifest["metadata"]["namespace"] == "llm"


@pytest.mark.parametrize("uri", ["s3://bucket/qwen", "pvc://models/qwen", "oci://registry/qwen:1"])
def test_a_model_uri_kserve_reads_is_kept(uri: str) -> None:
    manifest = render({"model": "/models/qwen"}, {"model_uri": uri, "name": "qwen"})
    assert manifest["spec"]["model"]["uri"] == uri


def test_a_local_model_path_is_refused_with_model_uri_advice(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match=r"local path.*model_uri = 's3://"):
        render({"model": str(tmp_path)})


def test_a_model_uri_scheme_kserve_lacks_is_refused() -> None:
    with pytest.raises(InvalidOptions, match=r"gs://bucket/m.*hf://, s3://, pvc://, oci://"):
        render(kubernetes={"model_uri": "gs://bucket/m"})


def test_a_name_that_is_not_a_dns_label_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="not a DNS label"):
        render(kubernetes={"name": "Qwen_7B"})


# -- replicas, parallelism and resources -------------------------------------------------------


def test_launch_replicas_are_the_resource_replicas() -> None:
    assert render({"replicas": 3})["spec"]["replicas"] == 3


def test_tensor_parallel_is_the_parallelism_field_and_its_gpus() -> None:
    spec = render({"parallel": {"tensor": 2}})["spec"]
    assert spec["parallelism"] == {"tensor": 2}
    assert main_container(spec)["resources"] == {
        "limits": {"nvidia.com/gpu": "2"},
        "requests": {"nvidia.com/gpu": "2"},
    }
    assert "--tensor-parallel-size" not in engine_args(spec)  # KServe's template sets it


def test_pipeline_parallel_is_a_field_an_arg_and_more_gpus() -> None:
    spec = render({"parallel": {"tensor": 2, "pipeline": 2}})["spec"]
    assert spec["parallelism"] == {"tensor": 2, "pipeline": 2}
    assert engine_args(spec)[:3] == ["--enable-prompt-tokens-details", "--pipeline-parallel-size", "2"]
    assert main_container(spec)["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_data_parallel_holds_every_rank_in_one_pod() -> None:
    spec = render({"parallel": {"data": 2, "expert": True}})["spec"]
    assert spec["parallelism"] == {"data": 2, "dataLocal": 2, "expert": True}
    args = engine_args(spec)
    assert args[args.index("--data-parallel-size") + 1] == "2"
    assert "--enable-expert-parallel" in args
    assert main_container(spec)["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_pipeline_with_data_parallel_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="pipeline and data parallelism together"):
        render({"parallel": {"pipeline": 2, "data": 2}})


def test_accelerator_and_resources_are_requested_and_limited() -> None:
    spec = render(
        {"parallel": {"tensor": 2}},
        {"accelerator": "amd.com/gpu", "resources": {"cpu": "4", "memory": "32Gi"}},
    )["spec"]
    wanted = {"cpu": "4", "memory": "32Gi", "amd.com/gpu": "2"}
    assert main_container(spec)["resources"] == {"limits": wanted, "requests": wanted}


def test_a_gpu_count_in_resources_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="comes from \\[launch\\] parallel"):
        render(kubernetes={"resources": {"nvidia.com/gpu": "8"}})


def test_a_cpu_target_requests_no_gpu_and_takes_the_cpu_recipe() -> None:
    spec = render({"cpu": True}, {"image": "vllm-cpu:latest"})["spec"]
    container = main_container(spec)
    assert container["image"] == "vllm-cpu:latest"
    assert "resources" not in container
    assert env_of(spec)["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert not any(str(v).startswith("/unillm-cpu-workdir") for v in env_of(spec).values())
    assert "--enforce-eager" in engine_args(spec)


def test_a_cpu_target_without_a_cpu_image_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="image = "):
        render({"cpu": True})


# -- engine settings as args -------------------------------------------------------------------


def test_engine_settings_are_args_rendered_by_the_adapter() -> None:
    spec = render({"max_model_len": 8192, "dtype": "bfloat16", "extra_args": ["--seed", "7"]})["spec"]
    args = engine_args(spec)
    assert args == [
        "--enable-prompt-tokens-details",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "8192",
        "--seed",
        "7",
    ]


def test_speculative_decoding_is_a_quoted_json_arg_that_survives_eval() -> None:
    spec = render({"speculative": {"method": "ngram", "num_tokens": 5}})["spec"]
    args = engine_args(spec)
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["method"] == "ngram" and config["num_speculative_tokens"] == 5


def test_a_local_draft_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match=r"draft_model.*local path"):
        render({"speculative": {"method": "draft", "draft_model": str(tmp_path)}})


def test_a_hub_draft_model_is_passed_to_vllm() -> None:
    spec = render({"speculative": {"method": "draft", "draft_model": "Qwen/Qwen2.5-0.5B"}})["spec"]
    args = engine_args(spec)
    assert json.loads(args[args.index("--speculative-config") + 1])["model"] == "Qwen/Qwen2.5-0.5B"


def test_env_is_plain_and_secret_env_comes_from_secrets() -> None:
    spec = render({"env": {"VLLM_LOGGING_LEVEL": "DEBUG"}}, {"secret_env": {"HF_TOKEN": "hf-token"}})["spec"]
    assert env_of(spec) == {
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "HF_TOKEN": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    }


def test_a_secret_value_in_env_is_refused_without_printing_it() -> None:
    with pytest.raises(InvalidOptions, match="secret_env") as caught:
        render({"env": {"HF_TOKEN": "hf_verysecretvalue"}})
    assert "hf_verysecretvalue" not in str(caught.value)


def test_an_api_key_is_refused_without_printing_it() -> None:
    with pytest.raises(InvalidOptions, match="VLLM_API_KEY") as caught:
        render({"api_key": "sk-verysecretvalue"})
    assert "sk-verysecretvalue" not in str(caught.value)


@pytest.mark.parametrize(
    ("extra_args", "variable"),
    [
        (["--api-key", "sk-verysecretvalue"], "VLLM_API_KEY"),
        (["--api-key=sk-verysecretvalue"], "VLLM_API_KEY"),
        (["--seed", "7", "--hf-token", "sk-verysecretvalue"], "HF_TOKEN"),
        (["--hf-token=sk-verysecretvalue"], "HF_TOKEN"),
    ],
)
def test_a_secret_engine_flag_is_refused_naming_the_secret_for_it(
    extra_args: list[str], variable: str
) -> None:
    with pytest.raises(InvalidOptions, match=f"secret_env = {{{variable} = ") as caught:
        render({"extra_args": extra_args})
    assert "sk-verysecretvalue" not in str(caught.value)


def test_a_secret_engine_flag_without_a_known_variable_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="extra_args --admin-api-key holds a secret") as caught:
        render({"extra_args": ["--admin-api-key", "sk-verysecretvalue"]})
    assert "sk-verysecretvalue" not in str(caught.value)


def test_engine_flags_that_only_look_secret_are_carried() -> None:
    args = ["--max-num-batched-tokens", "8192", "--hf-token", "--seed", "7"]  # a bare --hf-token: no value
    assert engine_args(render({"extra_args": args})["spec"])[-5:] == args


def test_runtime_lora_sets_vllms_switch_and_env() -> None:
    spec = render({"runtime_lora": True})["spec"]
    assert "--enable-lora" in engine_args(spec)
    assert env_of(spec)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


# -- LoRA ----------------------------------------------------------------------------------------


def test_lora_adapters_are_the_model_lora_field() -> None:
    spec = render(
        {
            "lora": {"sql": "org/qwen-sql-lora", "chat": "s3://bucket/chat"},
            "max_lora_rank": 32,
            "max_loras": 2,
        }
    )["spec"]
    assert spec["model"]["lora"] == {
        "adapters": [
            {"name": "sql", "uri": "hf://org/qwen-sql-lora"},
            {"name": "chat", "uri": "s3://bucket/chat"},
        ],
        "maxRank": 32,
        "maxAdapters": 2,
    }
    args = engine_args(spec)
    assert "--lora-modules" not in args and "--enable-lora" not in args  # KServe adds them


def test_a_local_lora_path_is_refused_with_lora_uris_advice(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match=r"lora_uris = \{sql = "):
        render({"lora": {"sql": str(tmp_path)}})


def test_lora_uris_give_a_local_adapter_its_cluster_uri(tmp_path: Path) -> None:
    spec = render({"lora": {"sql": str(tmp_path)}}, {"lora_uris": {"sql": "pvc://loras/sql"}})
    assert spec["spec"]["model"]["lora"]["adapters"] == [{"name": "sql", "uri": "pvc://loras/sql"}]


def test_an_oci_lora_uri_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="hf://, s3://, pvc:// URIs only"):
        render({"lora": {"sql": "oci://registry/sql"}})


def test_lora_uris_for_an_adapter_the_launch_lacks_are_refused() -> None:
    with pytest.raises(InvalidOptions, match="lora_uris names \\['sq'\\]"):
        render({"lora": {"sql": "org/sql"}}, {"lora_uris": {"sq": "s3://b/sql"}})


# -- router and prefill/decode -------------------------------------------------------------------


def test_the_default_router_is_a_managed_route_gateway_and_scheduler() -> None:
    assert render()["spec"]["router"] == {"route": {}, "gateway": {}, "scheduler": {}}


def test_policy_prefix_is_the_schedulers_default() -> None:
    assert render(TWO, policy="prefix")["spec"]["router"]["scheduler"] == {}


def test_policy_least_load_is_an_inline_load_only_scheduler_config() -> None:
    inline = render(TWO, policy="least_load")["spec"]["router"]["scheduler"]["config"]["inline"]
    assert inline["kind"] == "EndpointPickerConfig"
    scorers = {p["pluginRef"] for p in inline["schedulingProfiles"][0]["plugins"]}
    assert scorers == {"queue-scorer", "kv-cache-utilization-scorer", "max-score-picker"}


@pytest.mark.parametrize("policy", ["round_robin", "session"])
def test_a_policy_the_scheduler_lacks_is_refused(policy: str) -> None:
    with pytest.raises(UnsupportedFeature, match=f"policy '{policy}' on KServe.*no round-robin or session"):
        render(TWO, policy=policy)


def test_scheduler_false_leaves_the_route_only() -> None:
    router = render(kubernetes={"scheduler": False})["spec"]["router"]
    assert router == {"route": {}, "gateway": {}}


def test_scheduler_false_with_a_policy_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="no router to apply policy 'prefix'"):
        render(TWO, {"scheduler": False}, policy="prefix")


def test_a_named_gateway_is_a_gateway_ref() -> None:
    router = render(kubernetes={"gateway": "infra/llm-gateway"})["spec"]["router"]
    assert router["gateway"] == {"refs": [{"name": "llm-gateway", "namespace": "infra"}]}


def test_disaggregation_is_the_prefill_section_and_decode_replicas() -> None:
    spec = render({"parallel": {"tensor": 2}, "disaggregation": {"prefill": 2, "decode": 1}})["spec"]
    assert spec["replicas"] == 1
    assert spec["prefill"]["replicas"] == 2
    assert spec["prefill"]["parallelism"] == {"tensor": 2}
    for workload, role in ((spec["prefill"], "kv_producer"), (spec, "kv_consumer")):
        args = engine_args(workload)
        assert json.loads(args[args.index("--kv-transfer-config") + 1]) == {
            "kv_connector": "NixlConnector",
            "kv_role": role,
        }
        assert env_of(workload)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_disaggregation_with_replicas_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="replicas = 2 and disaggregation: give one of them"):
        render({"replicas": 2, "disaggregation": {"prefill": 1, "decode": 1}})


def test_mooncake_transfer_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match=r"mooncake.*NIXL"):
        render({"disaggregation": {"prefill": 1, "decode": 1, "transfer": "mooncake"}})


def test_disaggregation_with_least_load_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="prefill/decode scheduler"):
        render({"disaggregation": {"prefill": 1, "decode": 1}}, policy="least_load")


# -- refusals ------------------------------------------------------------------------------------


def test_another_engine_is_refused_naming_engine_feature_and_alternative() -> None:
    config = {"engine": "sglang", "launch": {"model": MODEL}}
    with pytest.raises(UnsupportedFeature) as caught:
        render_kserve(read_deployment(config, env={}))
    error = caught.value
    assert error.engine == "sglang"
    assert "LLMInferenceService" in error.feature
    assert 'engine = "vllm"' in error.alternative


@pytest.mark.parametrize(
    ("launch", "field"),
    [
        ({"in_process": True}, "in_process"),
        ({"prefix": ["docker", "exec", "box"]}, "prefix"),
        ({"cpus": [0, 1]}, "cpus"),
        ({"nodes": {"count": 2, "head": "10.0.0.1"}}, "nodes"),
        ({"pd": {"role": "prefill"}}, "pd"),
    ],
)
def test_local_only_launch_settings_are_refused(launch: dict[str, Any], field: str) -> None:
    with pytest.raises(UnsupportedFeature, match=f"\\[launch\\] {field} in a KServe deployment"):
        render(launch)


def test_a_config_that_connects_is_refused() -> None:
    with pytest.raises(InvalidOptions, match=r"needs a \[launch\] table"):
        read_deployment({"engine": "vllm", "base_url": "http://gpu:8000"}, env={})


def test_an_unknown_deploy_setting_is_refused() -> None:
    with pytest.raises(InvalidOptions, match=r"invalid \[deploy\].*replica"):
        read_deployment({"engine": "vllm", "launch": {"model": MODEL}, "deploy": {"replica": 2}}, env={})


def test_a_deploy_table_leaves_the_config_loadable_for_a_local_launch() -> None:
    deploy = {"kubernetes": {"namespace": "llm"}}
    config = load_config({"engine": "vllm", "launch": {"model": MODEL}, "deploy": deploy}, env={})
    assert config.deploy == deploy


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("replicas", 2, r"replicas goes in \[launch\] \(replicas = 2\)"),
        (
            "disaggregation",
            {"prefill": 1, "decode": 1},
            r"disaggregation goes in \[launch\] \(disaggregation = ",
        ),
        ("policy", "prefix", r"policy goes in the config's top level .*\(policy = \"prefix\"\)"),
    ],
)
def test_a_deploy_key_that_moved_says_where_it_lives_now(key: str, value: Any, where: str) -> None:
    config = {"engine": "vllm", "launch": {"model": MODEL}, "deploy": {key: value}}
    with pytest.raises(ConfigError, match=rf"\[deploy\] {key}: {where}.*a local or Ray launch reads"):
        read_deployment(config, env={})


def test_a_ray_cluster_table_is_ignored_by_a_kubernetes_deployment() -> None:
    ray = {"replicas": 2, "cluster": {"kind": "ray", "address": "10.0.0.1:6379"}}
    assert render(ray) == render({"replicas": 2})


def test_a_local_router_process_is_ignored_by_a_kubernetes_deployment() -> None:
    pd = {"disaggregation": {"prefill": 1, "decode": 1}}
    assert render({**pd, "router": "vllm-router"}) == render(pd)


def test_a_bad_ray_cluster_table_is_refused_for_kubernetes_too() -> None:
    with pytest.raises(InvalidOptions, match=r"\[launch.cluster\] kind = 'slurm'"):
        render({"cluster": {"kind": "slurm"}})


def test_a_policy_without_replicas_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"policy routes between replicas: set \[launch\] replicas"):
        render(policy="prefix")


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="unknown routing policy 'fastest'"):
        render(TWO, policy="fastest")


def test_a_misshapen_deploy_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="deploy"):
        load_config({"engine": "vllm", "launch": {"model": MODEL}, "deploy": 3}, env={})


# -- the CRD schema ------------------------------------------------------------------------------


def test_a_manifest_with_every_setting_validates() -> None:
    manifest = render(
        {
            "parallel": {"tensor": 2},
            "lora": {"sql": "org/sql"},
            "speculative": {"method": "ngram"},
            "env": {"A": "1"},
            "disaggregation": {"prefill": 2, "decode": 2},
        },
        {"namespace": "llm", "gateway": "gw", "resources": {"memory": "32Gi"}},
    )
    validate_manifest(manifest)  # render_kserve validated it already; this says so out loud


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("spec", "replicas"), "three", "spec.replicas: 'three' is not of type 'integer'"),
        (("spec", "modle"), {"uri": "hf://a/b"}, "Additional properties are not allowed \\('modle'"),
        (("spec", "model", "lora", "maxRank"), 0, "spec.model.lora.maxRank: 0 is less than the minimum"),
        (("spec", "model", "criticality"), "Urgent", "spec.model.criticality: 'Urgent' is not one of"),
    ],
)
def test_a_broken_manifest_fails_the_schema(path: tuple[str, ...], value: Any, problem: str) -> None:
    manifest = render({"lora": {"sql": "org/sql"}})
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(InvalidOptions, match=problem):
        validate_manifest(manifest)


INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("launch", "field"),
    [
        ({"replicas": INT32_MAX + 1}, "spec.replicas"),
        ({"disaggregation": {"prefill": INT32_MAX + 1, "decode": 1}}, "spec.prefill.replicas"),
        ({"parallel": {"tensor": 2**32 + 1}, "cpu": True}, "spec.parallelism.tensor"),
        ({"parallel": {"pipeline": INT32_MAX + 1}, "cpu": True}, "spec.parallelism.pipeline"),
        ({"parallel": {"data": INT32_MAX + 1}, "cpu": True}, "spec.parallelism.data"),
        ({"lora": {"sql": "org/sql"}, "max_lora_rank": INT32_MAX + 1}, "spec.model.lora.maxRank"),
        ({"lora": {"sql": "org/sql"}, "max_loras": INT32_MAX + 1}, "spec.model.lora.maxAdapters"),
    ],
)
def test_a_count_past_int32_is_refused_naming_the_field_and_the_bound(
    launch: dict[str, Any], field: str
) -> None:
    with pytest.raises(
        InvalidOptions, match=rf"{field}: \d+ does not fit an int32 field \(at most {INT32_MAX}\)"
    ):
        render(launch, {"image": "vllm-cpu:latest"} if launch.get("cpu") else None)


@pytest.mark.parametrize(
    "parallel",
    [{"tensor": 2**32 + 1}, {"tensor": 2**16, "pipeline": 2**16}, {"tensor": 2**16, "data": 2**16}],
)
def test_a_gpu_count_past_int32_is_refused_with_the_bound(parallel: dict[str, int]) -> None:
    with pytest.raises(
        InvalidOptions, match=rf"tensor \d+ x pipeline \d+ x data \d+ = .*at most {INT32_MAX}"
    ):
        render({"parallel": parallel})


def test_counts_at_the_int32_bound_render() -> None:
    spec = render({"replicas": INT32_MAX, "parallel": {"tensor": INT32_MAX}})["spec"]
    assert spec["replicas"] == spec["parallelism"]["tensor"] == INT32_MAX
    assert main_container(spec)["resources"]["limits"]["nvidia.com/gpu"] == str(INT32_MAX)


def test_the_schema_check_holds_int64_fields_to_their_range() -> None:
    manifest = render()
    manifest["spec"]["template"]["terminationGracePeriodSeconds"] = 2**63
    with pytest.raises(
        InvalidOptions, match=r"terminationGracePeriodSeconds: \d+ does not fit an int64 field"
    ):
        validate_manifest(manifest)


def test_a_bad_resource_quantity_fails_the_schema() -> None:
    manifest = render()
    main_container(manifest["spec"])  # the container is there to break
    manifest["spec"]["template"]["containers"][0]["resources"]["limits"]["memory"] = "lots"
    with pytest.raises(InvalidOptions, match=r"resources\.limits\.memory"):
        validate_manifest(manifest)


def test_a_kind_without_a_schema_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="no schema is kept for v1 Pod"):
        schema_for("v1", "Pod")


def test_the_vendored_schema_says_where_it_came_from() -> None:
    schema = schema_for("serving.kserve.io/v1alpha1", "LLMInferenceService")
    assert "KServe v0.20.0" in schema["$comment"]
    assert "1fb781055dd1567164358233e1125142ca6ef1fe" in schema["$comment"]


# -- output files ---------------------------------------------------------------------------------


def test_write_manifests_writes_one_file_per_resource(tmp_path: Path) -> None:
    manifests = [render(), render(kubernetes={"name": "other"})]
    files = write_manifests(manifests, tmp_path / "k8s", "yaml")
    assert [f.name for f in files] == [
        "qwen2-5-7b-instruct.llminferenceservice.yaml",
        "other.llminferenceservice.yaml",
    ]
    assert [yaml.safe_load(f.read_text()) for f in files] == manifests
    assert sorted(p.name for p in (tmp_path / "k8s").iterdir()) == sorted(f.name for f in files)


def test_write_manifests_into_a_file_fails_leaving_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "k8s"
    blocker.write_text("a file, not a folder")
    with pytest.raises(InvalidOptions, match="cannot write the manifests"):
        write_manifests([render()], blocker, "yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k8s"]


def test_yaml_without_pyyaml_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(InvalidOptions, match=r"unillm-sdk\[deploy\].*--json"):
        dump(render(), "yaml")


def test_json_output_needs_no_pyyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = render()
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert json.loads(dump(manifest, "json")) == manifest


# -- the command line -----------------------------------------------------------------------------

CONFIG = f"""\
engine = "vllm"
[launch]
model = "{MODEL}"
parallel = {{tensor = 2}}
replicas = 2
[deploy.kubernetes]
name = "qwen"
namespace = "llm"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "unillm.toml"
    path.write_text(CONFIG)
    return path


def test_cli_out_writes_the_rendered_manifest(config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--out", str(out)]) == 0
    (written,) = out.iterdir()
    assert yaml.safe_load(written.read_text()) == render_kserve(read_deployment(config_file))[0]


def test_cli_without_out_prints_the_yaml(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "kubernetes", "--config", str(config_file)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["metadata"]["name"] == "qwen" and printed["spec"]["replicas"] == 2


def test_cli_json_prints_json(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "LLMInferenceService"


def test_cli_refusal_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text('policy = "round_robin"\n' + CONFIG)
    out = tmp_path / "k8s"
    assert main(["deploy", "kubernetes", "--config", str(config), "--out", str(out)]) == 2
    assert "UnsupportedFeature" in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_a_secret_engine_flag_writing_and_printing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text(
        CONFIG.replace("[launch]\n", '[launch]\nextra_args = ["--api-key", "sk-verysecretvalue"]\n')
    )
    out = tmp_path / "k8s"
    assert main(["deploy", "kubernetes", "--config", str(config), "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert "VLLM_API_KEY" in printed.err
    assert "sk-verysecretvalue" not in printed.out + printed.err
    assert not out.exists()


def test_cli_apply_without_kubectl_says_so(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--apply"]) == 2
    assert "KubectlError: kubectl is not on PATH" in capsys.readouterr().err


def _recording_kubectl(folder: Path, url: str) -> Path:
    """A ``kubectl`` stand-in: logs each argv as a JSON line, answers like a cluster would."""
    log = folder / "kubectl.log"
    script = folder / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "args = sys.argv[1:]\n"
        "if args[:2] == ['config', 'current-context']: print('test-cluster')\n"
        "elif args[0] == 'apply': print('llminferenceservice.serving.kserve.io/qwen created')\n"
        f"elif args[0] == 'get': sys.stdout.write({url!r})\n"
    )
    script.chmod(0o755)
    return log


def test_cli_apply_checks_applies_and_prints_the_url_kubectl_reports(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _recording_kubectl(tmp_path, "http://gateway.example/llm/qwen")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "k8s"
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--out", str(out), "--apply"]) == 0
    file = str(out / "qwen.llminferenceservice.yaml")
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["config", "current-context"],
        ["apply", "--dry-run=client", "--validate=false", "-f", file],
        ["apply", "-f", file],
        ["get", "llminferenceservice.serving.kserve.io", "qwen", "-n", "llm", "-o", "jsonpath={.status.url}"],
    ]
    captured = capsys.readouterr()
    assert captured.out == "http://gateway.example/llm/qwen\n"
    assert 'unillm.connect("vllm", "http://gateway.example/llm/qwen", model="Qwen/Qwen2.5-7B-Instruct")' in (
        captured.err
    )


def test_cli_apply_before_a_url_says_how_to_find_it(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _recording_kubectl(tmp_path, "")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--apply"]) == 0
    out = capsys.readouterr().out
    assert "no URL yet" in out
    assert "kubectl get llminferenceservice.serving.kserve.io qwen -n llm -o jsonpath='{.status.url}'" in out


def test_a_failing_kubectl_is_a_kubectl_error_with_its_message(tmp_path: Path) -> None:
    script = tmp_path / "kubectl"
    script.write_text("#!/bin/sh\necho 'error: the server has no resource type' >&2\nexit 1\n")
    script.chmod(0o755)
    with pytest.raises(KubectlError, match=r"kubectl apply -f x.yaml failed \(exit 1\): error: the server"):
        Kubectl(str(script)).apply([Path("x.yaml")])


def _kubectl_printing(folder: Path, output: bytes) -> Kubectl:
    script = folder / "kubectl"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write({output!r})\n")
    script.chmod(0o755)
    return Kubectl(str(script))


def test_a_status_url_that_is_no_url_is_a_kubectl_error(tmp_path: Path) -> None:
    with pytest.raises(KubectlError, match=r"status\.url that is no URL: <html>"):
        _kubectl_printing(tmp_path, b"<html> gateway error </html>").url("qwen", "llm")


def test_undecodable_kubectl_output_is_read_not_raised(tmp_path: Path) -> None:
    with pytest.raises(KubectlError, match="no URL"):
        _kubectl_printing(tmp_path, b"\xff\xfe not utf-8").url("qwen", None)


def _cluster_kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found is None:
        return None
    done = subprocess.run([found, "config", "current-context"], capture_output=True, text=True, check=False)
    return found if done.returncode == 0 and done.stdout.strip() else None


@pytest.mark.skipif(
    _cluster_kubectl() is None,
    reason="needs kubectl with a cluster context (kubectl apply --dry-run=client asks the cluster for "
    "the resource types); this machine has none configured",
)
def test_kubectl_client_dry_run_accepts_the_manifest(tmp_path: Path) -> None:
    files = write_manifests([render(kubernetes={"name": "qwen"})], tmp_path, "yaml")
    assert "qwen" in Kubectl.find().dry_run(files)


def test_an_embedding_task_runs_vllms_pooling_runner() -> None:
    args = engine_args(render({"task": "embed"})["spec"])
    assert args[args.index("--runner") + 1] == "pooling"


def test_cli_wait_without_apply_is_refused(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--wait", "60"]) == 2
    assert "use it with --apply" in capsys.readouterr().err


def test_cli_apply_wait_waits_for_ready_before_reading_the_url(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _recording_kubectl(tmp_path, "http://gateway.example/llm/qwen")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--apply", "--wait", "90"]) == 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[-2] == [
        "wait",
        "--for=condition=Ready",
        "llminferenceservice.serving.kserve.io/qwen",
        "--timeout=90s",
        "-n",
        "llm",
    ]
    assert calls[-1][0] == "get"


def test_cli_check_runs_the_client_dry_run_and_applies_nothing(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _recording_kubectl(tmp_path, "")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--check"]) == 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[:3] for c in calls] == [
        ["config", "current-context"],
        ["apply", "--dry-run=client", "--validate=false"],
    ]


def test_cli_apply_without_kubectl_keeps_the_out_files(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "k8s"
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--out", str(out), "--apply"]) == 2
    assert [p.name for p in out.iterdir()] == ["qwen.llminferenceservice.yaml"]


def test_cli_apply_without_a_context_says_so(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 'error: current-context is not set' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["deploy", "kubernetes", "--config", str(config_file), "--apply"]) == 2
    assert "kubectl has no current context" in capsys.readouterr().err


def test_unillm_launch_replicas_variable_overrides_the_replicas() -> None:
    config = {"engine": "vllm", "launch": {"model": MODEL, "replicas": 2}}
    deployment = read_deployment(config, env={"UNILLM_LAUNCH__REPLICAS": "4"})
    assert deployment.replicas == 4


def test_unillm_deploy_variables_override_the_kubernetes_table() -> None:
    config = {"engine": "vllm", "launch": {"model": MODEL}, "deploy": {"kubernetes": {"name": "a"}}}
    deployment = read_deployment(config, env={"UNILLM_DEPLOY__KUBERNETES__NAME": "b"})
    assert deployment.settings.kubernetes.name == "b"


def test_a_namespace_that_is_not_a_dns_label_is_refused() -> None:
    with pytest.raises(InvalidOptions, match=r"kubernetes\.namespace"):
        render(kubernetes={"namespace": "LLM_Serving"})


@pytest.mark.parametrize(
    "block", [b for b in blocks(DOCS / "guide" / "kubernetes.md") if b.lang == "toml"], ids=lambda b: b.where
)
def test_each_config_in_the_kubernetes_guide_launches_locally_and_renders(block: Any, tmp_path: Path) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text(block.code)
    local = unillm.from_config(config, env={})  # built, not started
    assert isinstance(local, unillm.FleetLaunch)
    (manifest,) = render_kserve(read_deployment(config, env={}))
    assert manifest["kind"] == "LLMInferenceService"
