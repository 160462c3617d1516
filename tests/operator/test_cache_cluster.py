"""The watch-fed caches on the real control plane: they follow creates, updates and deletes, list again after a cut
watch, reflect the operator's own writes at once, and an admission pass no longer LISTs the cluster."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

import pytest

from railtrain.crds import contract
from railtrain.operator.reconciler import Reconciler
from railtrain.operator.kube.cached import CachedKube
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.kube.connection import connect
from tests.polling import wait_for

from .clusterkit import G, P, V, foreign_pod, job_body

pytestmark = pytest.mark.cluster

CLUSTER_WIDE = ("/api/v1/pods", "/api/v1/nodes", "/api/v1/namespaces", f"/apis/{G}/{V}/{P}")


@pytest.fixture
def cached(cluster):
    kube = CachedKube(connect(str(cluster.kubeconfig)).api)
    kube.start()
    wait_for(kube.synced, 60, "every cache to finish its first LIST")
    yield kube
    kube.stop()
    kube.api.close()


def rv(obj):
    return int(obj["metadata"]["resourceVersion"]) if obj else 0


def test_the_caches_follow_creates_updates_deletes_and_list_again_after_a_cut_watch(cached, api, namespace, gpu_nodes):
    core, _ = api
    (node,) = gpu_nodes(1)
    wait_for(lambda: cached.nodes.get(("", node)), 30, "the new Node in the cache")
    made = core.create_namespaced_pod(namespace, foreign_pod("a", node, gpus=1))
    wait_for(lambda: cached.active.get((namespace, "a")), 30, "pod a in the active-pods cache")
    assert cached.pods.get((namespace, "a")) is None  # not railtrain's: only the active-pods cache holds it
    changed = core.patch_namespaced_pod("a", namespace, {"metadata": {"labels": {"seen": "yes"}}})
    assert int(changed.metadata.resource_version) > int(made.metadata.resource_version)
    wait_for(lambda: rv(cached.active.get((namespace, "a"))) >= int(changed.metadata.resource_version), 30, "the update in the cache")
    core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
    wait_for(lambda: cached.active.get((namespace, "a")) is None, 30, "the deleted pod to leave the cache")

    informer = cached.informers["active"]
    relists = informer.relists
    wait_for(lambda: getattr(informer._watch, "_resp", None) is not None, 30, "the active-pods watch to be open")
    informer.break_stream()
    wait_for(lambda: informer.relists > relists, 30, "a fresh LIST after the cut watch")
    core.create_namespaced_pod(namespace, foreign_pod("b", node, gpus=1))
    wait_for(lambda: cached.active.get((namespace, "b")), 30, "a pod created after the relist in the cache")


def test_a_refresh_serves_from_the_api_until_every_cache_has_listed_again(cached):
    relists = {name: informer.relists for name, informer in cached.informers.items()}
    cached.refresh()  # what a new leader does
    assert not cached.synced()
    wait_for(cached.synced, 60, "every cache to list again")
    assert all(informer.relists > relists[name] for name, informer in cached.informers.items())


def test_the_operators_own_writes_are_in_the_cache_before_the_watch_delivers_them(cached, api, namespace):
    _, custom = api
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("j", nodes=1))
    wait_for(lambda: cached.jobs.get((namespace, "j")), 30, "the job in the cache")
    for informer in cached.informers.values():  # no watch event can bring the writes below: only write-through can
        informer.stop()
        informer.break_stream()
        informer._thread.join(30)
        assert not informer._thread.is_alive()
    assert cached.patch_status(namespace, "j", {"rankShift": 3})
    assert cached.jobs.get((namespace, "j"))["status"]["rankShift"] == 3  # no wait: applied from the answer
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j-0", "namespace": namespace, "labels": {contract.LABEL_JOB_NAME: "j"}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulingGates": [{"name": "railtrain.dev/test"}]}}
    assert cached.create(pod)
    assert cached.pods.get((namespace, "j-0")) and cached.active.get((namespace, "j-0")) is None  # railtrain's: one store
    assert (namespace, "j-0") in {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in cached.list_active_pods()}


def counting(kube: Kube) -> Counter:
    """Count ``kube``'s cluster-wide LIST requests (not WATCHes) by path, through its REST client."""
    seen: Counter = Counter()
    request = kube.api.rest_client.request

    def counted(method, url, *args, **kwargs):
        parts = urlsplit(url)
        if method == "GET" and parts.path in CLUSTER_WIDE and "watch=" not in parts.query:
            seen[parts.path] += 1
        return request(method, url, *args, **kwargs)

    kube.api.rest_client.request = counted
    return seen


def test_admission_passes_do_not_list_the_cluster_once_the_caches_are_warm(cached, cluster, api, namespace, gpu_nodes, operator_process):
    _, custom = api
    operator_process.stop()  # this test runs the passes itself
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("big", nodes=64))  # never fits: waits every pass
    plain = Kube(connect(str(cluster.kubeconfig)).api)
    direct, through_cache = counting(plain), counting(cached)
    Reconciler(cached).reconcile_job(namespace, "big", admit=False)  # read once fresh: the cache now holds it
    for _ in range(20):
        assert [d.job for d in Reconciler(cached).admission_pass()] == [f"{namespace}/big"]
        Reconciler(plain).admission_pass()
    assert sum(through_cache.values()) == 0, through_cache
    assert direct[f"/apis/{G}/{V}/{P}"] >= 20 and direct["/api/v1/pods"] >= 40, direct  # what each pass cost before
    plain.api.close()


def test_a_reconcile_reads_its_jobs_pods_from_the_cache_which_an_events_pod_updates_first(cached, api, namespace, gpu_nodes, operator_process):
    """A reconcile no longer LISTs its job's pods (CachedKube.list_job_pods), and the pod of the event that asked for it
    is in the cache before it runs (observe_event), even when the informers' own watch has not delivered it."""
    core, custom = api
    operator_process.stop()  # this test reconciles itself
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("small", nodes=2))
    wait_for(lambda: cached.jobs.get((namespace, "small")), 30, "the job in the cache")
    Reconciler(cached).reconcile_job(namespace, "small")  # Service, status, then the admission pass creates both ranks
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 2, 30, "both ranks created")
    wait_for(lambda: len(cached.list_job_pods(namespace, "small")) == 2, 30, "both ranks in the cache")
    lists: Counter = Counter()
    request = cached.api.rest_client.request

    def counted(method, url, *args, **kwargs):
        parts = urlsplit(url)
        if method == "GET" and parts.path == f"/api/v1/namespaces/{namespace}/pods" and "watch=" not in parts.query:
            lists[parts.path] += 1
        return request(method, url, *args, **kwargs)

    cached.api.rest_client.request = counted
    for _ in range(5):
        Reconciler(cached).reconcile_job(namespace, "small", admit=False)
    assert not lists, lists
    for informer in cached.informers.values():  # from here on only the handler's event can change the cache
        informer.stop()
        informer.break_stream()
        informer._thread.join(30)
    core.patch_namespaced_pod("small-1", namespace, {"metadata": {"labels": {"example.com/seen": "yes"}}})
    pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod("small-1", namespace))
    assert "example.com/seen" not in cached.list_job_pods(namespace, "small")[1]["metadata"]["labels"]
    cached.observe_event("pods", "MODIFIED", pod)
    assert cached.list_job_pods(namespace, "small")[1]["metadata"]["labels"]["example.com/seen"] == "yes"
    cached.observe_event("pods", "DELETED", pod)
    assert [p["metadata"]["name"] for p in cached.list_job_pods(namespace, "small")] == ["small-0"]
    assert not lists, lists


def test_a_reconcile_reads_its_job_and_service_from_the_caches_and_a_job_event_updates_the_job_first(cached, api, namespace, gpu_nodes, operator_process):
    """A reconcile GETs neither its job nor its Service once the caches hold them (CachedKube.read_job, get_service),
    and the job of the event that asked for it is in the cache first (on_job_event applies it), even when the
    informers' own watch has not delivered it: a user's suspend is acted on at that reconcile."""
    core, custom = api
    operator_process.stop()  # this test reconciles itself
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("small", nodes=2))
    wait_for(lambda: cached.jobs.get((namespace, "small")), 30, "the job in the cache")
    Reconciler(cached).reconcile_job(namespace, "small")  # the admission pass creates the Service and both ranks
    wait_for(lambda: cached.get_service(namespace, "small") is not None, 30, "the Service in the cache")
    wait_for(lambda: len(cached.list_job_pods(namespace, "small")) == 2, 30, "both ranks in the cache")
    reads: Counter = Counter()
    request = cached.api.rest_client.request

    def counted(method, url, *args, **kwargs):
        parts = urlsplit(url)
        if method == "GET" and "watch=" not in parts.query:
            reads[parts.path] += 1
        return request(method, url, *args, **kwargs)

    cached.api.rest_client.request = counted
    for _ in range(5):
        assert Reconciler(cached).reconcile_job(namespace, "small", admit=False) is not None
    job_path = f"/apis/{G}/{V}/namespaces/{namespace}/{P}/small"
    assert reads[job_path] == 0 and reads[f"/api/v1/namespaces/{namespace}/services/{contract.service_name('small')}"] == 0, reads
    for informer in cached.informers.values():  # from here on only the handler's event can change the cache
        informer.stop()
        informer.break_stream()
        informer._thread.join(30)
    suspended = custom.patch_namespaced_custom_object(G, V, namespace, P, "small", {"spec": {"runPolicy": {"suspend": True}}})
    Reconciler(cached).reconcile_job(namespace, "small", admit=False)  # the cache does not know of the suspend yet
    pods = core.list_namespaced_pod(namespace).items
    assert len(pods) == 2 and not any(p.metadata.deletion_timestamp for p in pods)
    cached.observe_event("jobs", "MODIFIED", suspended)  # what on_job_event does with the event's object
    Reconciler(cached).reconcile_job(namespace, "small", admit=False)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items or all(p.metadata.deletion_timestamp for p in core.list_namespaced_pod(namespace).items),
             30, "the suspended gang's pods deleted")


def test_concurrent_calls_beside_the_watches_reuse_the_pools_connections(cached, api, namespace, caplog):
    """Every informer holds a connection for its watch; the operator's pools of pod creators, deciders and handler
    threads call the API beside them. With the client's default pool (5 × CPUs) most of those calls opened a new
    TLS connection and threw it away ("Connection pool is full"); with :data:`POOL_CONNECTIONS` they reuse one."""
    from concurrent.futures import ThreadPoolExecutor

    from railtrain.operator.kube.connection import POOL_CONNECTIONS

    for informer in cached.informers.values():
        wait_for(lambda informer=informer: getattr(informer._watch, "_resp", None) is not None, 30, f"the {informer.name} watch to be open")
    threads = 40
    assert len(cached.informers) + threads <= POOL_CONNECTIONS
    caplog.set_level("WARNING", logger="urllib3.connectionpool")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(3):
            list(pool.map(lambda i: cached.get_job(namespace, f"absent-{i}"), range(threads)))
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
