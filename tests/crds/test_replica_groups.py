"""Replica groups' layout and pod contract (crds/replica_groups.py), pure."""

from __future__ import annotations

import pytest

from railtrain.crds import replica_groups as rg
from railtrain.crds.contract_errors import ContractError
from railtrain.crds.validation import parse_manifest


def job(**spec):
    return parse_manifest({"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "ft"},
                           "spec": {"image": "img:1", "nodes": 4, "procsPerNode": 2} | spec})


def test_a_valid_job_keeps_its_replica_groups_and_defaults():
    ft = job(faultTolerance={"replicaGroups": 2}, parallelism={"data": 4, "fsdp": 2}).spec.fault_tolerance
    assert (ft.replica_groups, ft.min_replicas, ft.quorum_timeout_seconds) == (2, 1, 300)


def test_groups_own_consecutive_whole_nodes():
    groups = rg.layout(nodes=6, procs_per_node=4, groups=3)
    assert [(g.group, g.first_node, g.nodes, g.world_size) for g in groups] == [(0, 0, 2, 8), (1, 2, 2, 8), (2, 4, 2, 8)]
    assert [rg.group_of(n, 6, 3) for n in range(6)] == [0, 0, 1, 1, 2, 2]
    assert groups[1].node_rank(3) == 1
    with pytest.raises(ValueError, match="node 4 is not in replica group 1"):
        groups[1].node_rank(4)
    with pytest.raises(ValueError, match="must be at least 1 and divide nodes 5"):
        rg.layout(5, 1, 2)


def test_the_pod_environment_round_trips_under_torchfts_own_names():
    ft = rg.FaultTolerance(replica_groups=3, min_replicas=2, quorum_timeout_seconds=60)
    env = rg.replica_group_env(ft, 2, rg.lighthouse_address("job-lighthouse.ns"))
    assert env["TORCHFT_LIGHTHOUSE"] == "http://job-lighthouse.ns:29510"
    assert (env["REPLICA_GROUP_ID"], env["NUM_REPLICA_GROUPS"]) == ("2", "3")
    assert rg.read_replica_group_env(env) == rg.ReplicaGroupEnv("http://job-lighthouse.ns:29510", 2, 3, 2, 60)
    assert rg.read_replica_group_env({}) is None
    with pytest.raises(ValueError, match="out of range 0…2"):
        rg.replica_group_env(ft, 3, "http://x:1")


@pytest.mark.parametrize("env,sentence", [
    ({"NUM_REPLICA_GROUPS": "2", "TORCHFT_LIGHTHOUSE": "http://x:1"}, "REPLICA_GROUP_ID is unset"),
    ({"NUM_REPLICA_GROUPS": "2", "REPLICA_GROUP_ID": "2", "TORCHFT_LIGHTHOUSE": "http://x:1"}, "REPLICA_GROUP_ID=2 must be between 0 and NUM_REPLICA_GROUPS − 1 = 1"),
    ({"NUM_REPLICA_GROUPS": "two", "REPLICA_GROUP_ID": "0"}, "NUM_REPLICA_GROUPS='two' is not a whole number"),
    ({"NUM_REPLICA_GROUPS": "2", "REPLICA_GROUP_ID": "0"}, "TORCHFT_LIGHTHOUSE is unset"),
])
def test_a_broken_pod_environment_is_one_sentence(env, sentence):
    with pytest.raises(ContractError, match=sentence):
        rg.read_replica_group_env(env)
