"""`railtrain validate` and the API server agree on every manifest (differential test, issue 11).

Hypothesis generates manifests by setting fields of a valid one to values of
every JSON type (right and wrong types, bounds, null, unknown fields); each
goes through :func:`railtrain.crds.validation.parse_manifest` (what
``railtrain validate`` runs) and through a server-side dry-run create on the
real API server with strict field validation (what ``railtrain submit`` and
``kubectl apply`` send). The verdicts (accepted or refused) must be equal; the
first disagreement is printed with both answers.
"""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from railtrain.crds import contract
from railtrain.crds.validation import ManifestError, parse_manifest
from tests.conftest import fixed_namespace

BATCH = 50
BATCHES = 21  # > 1,000 manifests

INTS = [-1, 0, 1, 2, 3, 4, 8, 16, 64, 65, 4096, 4097, 2**31 - 1, 2**31, -(2**31) - 1]
SCALARS = [None, True, False, 1.0, 2.5, "5", "", "x", "-1", "none", "preferred", "required", "node", "pod",
           "/ckpt", "s3://b/x", "railtrain.dev/rack", "kubernetes.io/hostname", "16", "64Gi", "my-claim", "Bad_Claim",
           "lots", "2GB", "-5Gi", "500m", "1e3", "+1Ki", ".5", "1.5", "-0", "1" * 65,
           "bf16", "fp8", "fp32", "fp16", "tensorwise", "rowwise",
           "not a label!!", "a/b/c", "x/", "/x", "Upper.Case/x", "rack", "a" * 63, "a" * 64, "x." + "a" * 252 + "/n", "x." + "a" * 251 + "/n"]
COMPOSITES = [[], ["a"], [1], [None], ["torchrun", "-m", "x"], {}, {"a": 1}, [{"name": "A", "value": "1"}],
              [{"name": "A"}, {"name": "A"}], [{"name": "1A", "value": "x"}], [{"value": "x"}], {"minNodes": 1}, {"minNodes": 3},
              {"data": 16}, {"data": 2, "tensor": 8}, {"tensor": 3, "data": 1}, {"context": 2, "data": 8}, {"context": 8, "data": 2},
              {"context": 16}, {"context": 4, "tensor": 2, "data": 2}, {"context": 3, "data": 1}, {"context": 2, "pipeline": 8}, {"policy": "required"}, {"policy": "required", "level": ""},
              {"policy": "required", "level": "railtrain.dev/rack"}, {"policy": "preferred", "level": "bad key!"},
              {"cpu": 0, "memory": "0"}, {"cpu": 4, "shm": 0}, {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"cpu": "1"}}}]}},
              {"spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": "v", "mountPath": "/dev/shm"}]}], "volumes": [{"name": "v", "emptyDir": {}}]}}, {"spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}], "volumes": [{"name": "v", "emptyDir": {}}]}}, {"gpus": None}, {"volume": "pod", "sizeLimit": "1Gi"},
              {"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}},
              {"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]}},
              {"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}}}},
              {"spec": {"containers": [{"name": "x", "image": "x:1", "ports": [{"containerPort": 80, "hostPort": 80}]}]}},
              {"compute": "fp8"}, {"compute": "bf16"}, {"compute": "fp8", "float8": {"emulate": True}}, {"compute": "bf16", "float8": {}},
              {"recipe": "rowwise", "emulate": True}, {"emulate": False},
              {"replicaGroups": 2}, {"replicaGroups": 2, "minReplicas": 3}, {"replicaGroups": 3}, {"replicaGroups": 1}, {"replicaGroups": 2, "quorumTimeoutSeconds": 0},
              {"app": "x"}, {"bad key!": "x"}, {"a": "x" * 64}, {"railtrain.dev/x": ""}, {"a": 1}, {"a": None}]
VALUES = st.one_of(st.sampled_from(INTS), st.sampled_from(SCALARS), st.sampled_from(COMPOSITES))

PATHS = [
    "spec.image", "spec.command", "spec.args", "spec.env", "spec.resources", "spec.resources.gpus", "spec.resources.cpu",
    "spec.resources.memory", "spec.resources.shm", "spec.resources.gpuResourceName", "spec.nodes", "spec.procsPerNode", "spec.parallelism",
    "spec.parallelism.data", "spec.parallelism.fsdp", "spec.parallelism.tensor", "spec.parallelism.pipeline", "spec.parallelism.context", "spec.topology",
    "spec.topology.policy", "spec.topology.level", "spec.priority", "spec.elastic", "spec.elastic.minNodes", "spec.checkpoint",
    "spec.checkpoint.interval", "spec.checkpoint.location", "spec.checkpoint.keep", "spec.checkpoint.volumeClaim",
    "spec.checkpoint.memory", "spec.checkpoint.memory.keep", "spec.checkpoint.memory.sizeLimit", "spec.checkpoint.memory.volume", "spec.checkpoint.memory.hostPath",
    "spec.checkpoint.local", "spec.checkpoint.local.interval", "spec.checkpoint.local.sizeLimit", "spec.runPolicy",
    "spec.runPolicy.backoffLimit", "spec.runPolicy.activeDeadlineSeconds", "spec.runPolicy.suspend",
    "spec.runPolicy.gangTimeoutSeconds", "spec.precision", "spec.precision.compute", "spec.precision.float8", "spec.precision.float8.recipe",
    "spec.precision.float8.emulate", "spec.faultTolerance", "spec.faultTolerance.replicaGroups", "spec.faultTolerance.minReplicas",
    "spec.faultTolerance.quorumTimeoutSeconds", "spec.template", "spec.unknownField", "spec.resources.unknown", "metadata.name", "spec",
    "metadata.labels", "metadata.annotations", "metadata.unknownField", "metadata.generation", "apiVersion", "kind",
]


def base() -> dict:
    return {
        "apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}", "kind": contract.KIND, "metadata": {"name": "diff"},
        "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}},
    }


def put(manifest: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    node = manifest
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[leaf] = copy.deepcopy(value)


@st.composite
def manifests(draw) -> dict:
    m = base()
    for path, value in draw(st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3)):
        put(m, path, value)
    return m


def local_verdict(m: dict) -> tuple[bool, str]:
    try:
        parse_manifest(copy.deepcopy(m))
        return True, "valid"
    except ManifestError as err:
        return False, str(err)


def server_verdict(custom, namespace: str, m: dict) -> tuple[bool, str]:
    try:
        custom.create_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, m,
                                               dry_run="All", field_validation="Strict")
        return True, "created (dry run)"
    except ApiException as err:
        if err.status in (400, 422):
            return False, json.loads(err.body).get("message", err.body)
        raise


@pytest.fixture(scope="module")
def target(kube):
    with fixed_namespace(kube, "validate-differential") as name:
        yield kube.custom, name


def test_validate_and_the_api_server_agree_on_generated_manifests(target):
    custom, namespace = target
    pool = ThreadPoolExecutor(8)
    seen = {"count": 0}

    @settings(max_examples=BATCHES, deadline=None, phases=(Phase.explicit, Phase.generate), database=None)
    @given(st.lists(manifests(), min_size=BATCH, max_size=BATCH))
    def batch(ms):
        servers = list(pool.map(lambda m: server_verdict(custom, namespace, m), ms))
        seen["count"] += len(ms)
        for m, (ok_server, why_server) in zip(ms, servers):
            ok_local, why_local = local_verdict(m)
            assert ok_local == ok_server, (
                f"first disagreement:\n  manifest: {json.dumps(m)}\n  railtrain validate: {why_local}\n  API server: {why_server}"
            )

    try:
        batch()
    finally:
        pool.shutdown()
    assert seen["count"] >= 1000


@pytest.mark.parametrize("value", [1.0, 1.5, 2, -1.0, "1", True])
def test_metadata_numbers_get_the_api_servers_verdict(target, value):
    """Inputs the generator found (stop 35's fresh-clone run): ``metadata.generation: 1.0`` was refused by
    ``railtrain validate`` and accepted by the API server, which reads a whole number written with a fraction as
    the integer. Each value here, on ``generation`` and ``deletionGracePeriodSeconds``, gets the same verdict from both."""
    custom, namespace = target
    for field in ("generation", "deletionGracePeriodSeconds"):
        m = {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "meta", field: value},
             "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}}}
        ok_server, why_server = server_verdict(custom, namespace, m)
        ok_local, why_local = local_verdict(m)
        assert ok_local == ok_server, (field, value, why_local, why_server)
