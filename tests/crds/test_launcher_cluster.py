"""Issue 26 item 5 on the real control plane: torchrun's restart flag in a job created past ``railtrain validate``
(kubectl) is Failed by the operator with validate's sentence; ``PET_MAX_RESTARTS`` is refused by the API server (CEL)."""

from __future__ import annotations

from railtrain.crds import contract, launcher
from tests.crds.dryrun import dry_run
from tests.crds.test_launcher import manifest
from tests.polling import wait_for


def test_the_api_server_refuses_the_restart_count_by_environment_variable(kube):
    refused = dry_run(kube, manifest(env=[{"name": "PET_MAX_RESTARTS", "value": "3"}]))
    assert refused is not None and launcher.ENV_MESSAGE in refused, refused
    assert dry_run(kube, manifest(env=[{"name": "PET_MAX_RESTARTS", "value": "0"}])) is None


def test_the_api_server_refuses_spares_without_restart_in_place_or_with_replica_groups(kube):
    refused = dry_run(kube, manifest(spares=1))
    assert refused is not None and launcher.SPARES_MESSAGE in refused, refused
    groups = manifest(spares=1, command=["torchrun"], runPolicy={"restartInPlace": True}, faultTolerance={"replicaGroups": 2})
    refused = dry_run(kube, groups)
    assert refused is not None and launcher.SPARES_GROUPS_MESSAGE in refused, refused
    assert dry_run(kube, manifest(spares=1, command=["torchrun"], runPolicy={"restartInPlace": True})) is None


def test_the_operator_fails_a_job_that_gives_torchrun_restarts_with_the_reason(kube, namespace, operator):
    body = manifest(command=["torchrun", "--max-restarts=2", "-m", "railtrain.trainer"])
    body["metadata"] = {"name": "torchrun-restarts", "namespace": namespace}
    kube.custom.create_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, body)

    def failed():
        status = kube.custom.get_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, "torchrun-restarts").get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None) if status.get("phase") == "Failed" else None

    condition = wait_for(failed, 60, "the job to be Failed")
    assert condition["reason"] == "InvalidSpec" and launcher.FLAG_MESSAGE in condition["message"], condition
    assert "found '--max-restarts=2'" in condition["message"], condition
    assert kube.core.list_namespaced_pod(namespace).items == []  # never admitted: no pod ever ran torchrun


def test_the_operator_fails_a_job_with_a_supervisor_tunable_out_of_range_with_validates_sentence(kube, namespace, operator):
    """``RAILTRAIN_SUPERVISOR_LOST_SECONDS`` outside 1–600 s has no CEL rule (a regular expression over env values
    exceeds the CRD's cost budget): a job created past ``railtrain validate`` is Failed by the operator with the
    sentence, and no pod is created."""
    from railtrain.crds import supervisor

    body = manifest(env=[{"name": supervisor.ENV_LOST, "value": "0.5"}])
    body["metadata"] = {"name": "lost-too-short", "namespace": namespace}
    kube.custom.create_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, body)

    def failed():
        job = kube.custom.get_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, "lost-too-short")
        conds = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        return conds.get("Failed") if conds.get("Failed", {}).get("status") == "True" else None

    cond = wait_for(failed, 60, "the job Failed")
    assert supervisor.TUNABLE_MESSAGE in cond["message"], cond
    assert not kube.core.list_namespaced_pod(namespace, label_selector=f"{contract.LABEL_JOB_NAME}=lost-too-short").items
