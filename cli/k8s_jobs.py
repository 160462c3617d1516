"""Cluster calls of the job commands: delete, suspend/resume, pods, Events, logs, and the cluster snapshot.

Like :mod:`railtrain.cli.k8s` (whose connection and error sentences these
reuse), every function talks to kube-apiserver through the official
``kubernetes`` client, reads its errors through the API edge's mapping
(:mod:`railtrain.operator.kube.errors`), and turns a client failure into a
:class:`~railtrain.cli.errors.CliError` sentence at this boundary, where the
intent of the request is known. Objects are returned as the JSON mappings the
server sent (camelCase), the form the views and the operator's pure modules read.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from railtrain.cli.errors import CliError
from railtrain.cli.k8s import CRD_HINT, REQUEST_TIMEOUT, RESOURCE, Cluster, _status_body, describe_client_error, get_job
from railtrain.crds import contract
from railtrain.crds.podtemplate import TRAINER
from railtrain.operator.kube.errors import ApiError, Gone, NotFound, call, typed

T = TypeVar("T")


def _core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api.api_client)


def _call(cluster: Cluster, fn: Callable[[], T], missing: str | None = None) -> T:
    """Run one request; a 404 becomes ``missing`` (when given), any other failure one sentence."""
    try:
        return call(fn)
    except (ApiError, HTTPError) as err:
        if isinstance(err, NotFound) and missing is not None:
            if err.details.get("reason") == "NotFound" or "trainingjob" not in missing:
                raise CliError(missing) from None
            raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
        raise describe_client_error(err, cluster.host) from None


def _json(response: Any) -> Any:
    return json.loads(response.data)


def delete_job(cluster: Cluster, namespace: str, name: str) -> None:
    """Delete a TrainingJob; its pods and Service go with it (they are owned by the job).

    Raises:
        CliError: the job does not exist, or the server cannot be reached.
    """
    _call(
        cluster,
        lambda: cluster.api.delete_namespaced_custom_object(
            contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT
        ),
        f"trainingjob {name} not found in namespace {namespace}",
    )


def set_suspend(cluster: Cluster, namespace: str, name: str, suspend: bool) -> bool:
    """Set ``spec.runPolicy.suspend`` (a merge patch; the operator deletes or recreates the gang).

    Returns:
        Whether the value changed (False: the job already was in that state).

    Raises:
        CliError: the job does not exist or is finished, the server refused the
            change, or the server cannot be reached.
    """
    job = get_job(cluster, namespace, name)
    phase = (job.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise CliError(f"trainingjob {name} has finished ({phase}); a finished job cannot be {'suspended' if suspend else 'resumed'}")
    if bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend")) == suspend:
        return False
    body = {"spec": {"runPolicy": {"suspend": suspend}}}
    _call(
        cluster,
        lambda: cluster.api.patch_namespaced_custom_object(
            contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, body, _request_timeout=REQUEST_TIMEOUT
        ),
        f"trainingjob {name} not found in namespace {namespace}",
    )
    return True


def job_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """Every pod labelled with the job's name (current and kept earlier gangs), sorted by restart count then rank."""
    selector = f"{contract.LABEL_JOB_NAME}={name}"
    items = _call(cluster, lambda: _json(_core(cluster).list_namespaced_pod(namespace, label_selector=selector, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)))["items"]

    def key(pod: dict[str, Any]) -> tuple[int, int, str]:
        meta = pod["metadata"]
        try:
            restart = int((meta.get("annotations") or {}).get(contract.ANNOTATION_RESTART, 0))
            rank = int((meta.get("labels") or {}).get(contract.LABEL_NODE_RANK, 0))
        except ValueError:
            restart, rank = 0, 0
        return restart, rank, meta["name"]

    return sorted(items, key=key)


def job_events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Events about the job (``involvedObject.name``), oldest first."""
    selector = f"involvedObject.name={name},involvedObject.kind={contract.KIND}"
    items = _call(cluster, lambda: _json(_core(cluster).list_namespaced_event(namespace, field_selector=selector, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)))["items"]
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")


def read_log(cluster: Cluster, namespace: str, pod: str, previous: bool = False, timestamps: bool = True) -> str:
    """The training container's whole log of ``pod`` (``previous``: of its container's previous run).

    Raises:
        CliError: the kubelet has no log for it (the sentence says why), or the server cannot be reached.
    """
    resp = _open_log(cluster, namespace, pod, previous=previous, timestamps=timestamps, _request_timeout=REQUEST_TIMEOUT)
    return resp.data.decode("utf-8", errors="replace")


def _open_log(cluster: Cluster, namespace: str, pod: str, **options: Any) -> Any:
    """The log request for the training container of ``pod`` (``options``: the client's log parameters), answer unread.

    Raises:
        CliError: the kubelet has no log for it (the sentence says why), or the server cannot be reached.
    """
    try:
        return call(_core(cluster).read_namespaced_pod_log, pod, namespace, container=TRAINER, _preload_content=False, **options)
    except ApiError as err:
        raise CliError(f"no log of pod {pod}: {_log_refusal(err)}") from None
    except HTTPError as err:
        raise describe_client_error(err, cluster.host) from None


# (connect, read) seconds for a followed log. The client (kubernetes 37.x) validates ``_request_timeout`` as
# None, one positive number (a total, which would cut a long follow) or two positive numbers, so an unbounded
# read is spelled as a day of silence; a trainer quiet for longer ends the follow with one sentence.
FOLLOW_TIMEOUT = (10, 24 * 3600)


def stream_log(cluster: Cluster, namespace: str, pod: str, timestamps: bool = True) -> Iterator[str]:
    """The training container's log lines as they are written (``follow``), until the container ends.

    Raises:
        CliError: as :func:`read_log`, or the stream broke off after it was opened.
    """
    resp = _open_log(cluster, namespace, pod, follow=True, timestamps=timestamps, _request_timeout=FOLLOW_TIMEOUT)
    try:
        for raw in resp.stream(decode_content=True):
            yield from raw.decode("utf-8", errors="replace").splitlines()
    except HTTPError as err:  # the connection broke off mid-stream (the node or the API server went away)
        raise CliError(f"the log of pod {pod} broke off: {describe_client_error(err, cluster.host).messages[0]}") from None
    finally:
        resp.release_conn()


def _log_refusal(err: ApiError | ApiException) -> str:
    """Why the API server gave no log: its message, said plainly when it could not reach the node's kubelet."""
    message = " ".join(str(_status_body(err).get("message") or err.reason or err.status).split())
    if "containerLogs" in message and any(w in message for w in ("dial tcp", "connection refused", "no such host", "i/o timeout")):
        cause = next((w for w in ("no such host", "connection refused", "i/o timeout") if w in message), "dial failed")
        return f"the API server could not reach the kubelet of the pod's node ({cause}; KWOK nodes have none, logs need a real kubelet such as kind's)"
    return message


def cluster_objects(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """Nodes, every pod, and every TrainingJob of the cluster: what admission reads (``railtrain snapshot``, ``plan``).

    Returns:
        ``{"nodes": [...], "pods": [...], "trainingjobs": [...]}``, each the server's JSON items.
    """
    core = _core(cluster)
    nodes = _call(cluster, lambda: _json(core.list_node(_preload_content=False, _request_timeout=REQUEST_TIMEOUT)))["items"]
    pods = _call(cluster, lambda: _json(core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=REQUEST_TIMEOUT)))["items"]
    jobs = _call(
        cluster,
        lambda: cluster.api.list_cluster_custom_object(contract.API_GROUP, contract.API_VERSION, contract.PLURAL, _request_timeout=REQUEST_TIMEOUT),
        f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}",
    )["items"]
    return {"nodes": nodes, "pods": pods, "trainingjobs": jobs}


def job_names(cluster: Cluster, namespace: str | None) -> list[str]:
    """Names of the TrainingJobs in ``namespace`` (every namespace when None), for shell completion."""
    if namespace is None:
        result = cluster.api.list_cluster_custom_object(contract.API_GROUP, contract.API_VERSION, contract.PLURAL, _request_timeout=(2, 3))
    else:
        result = cluster.api.list_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, _request_timeout=(2, 3))
    return sorted(o["metadata"]["name"] for o in result.get("items") or [])


def watch_job(cluster: Cluster, namespace: str, name: str, tick_s: int = 2) -> Iterator[dict[str, Any] | None]:
    """The job as it is now, then again after every change (a watch, so no change is missed), and ``None`` every
    ``tick_s`` seconds without one (for a live view's clock).

    Raises:
        CliError: the job does not exist or was deleted (a sentence saying "not found"), or the server cannot be reached.
    """
    from kubernetes import watch

    obj = get_job(cluster, namespace, name)
    yield obj
    rv = obj["metadata"].get("resourceVersion")
    gone = f"trainingjob {name} not found in namespace {namespace}"
    while True:
        w = watch.Watch()
        try:
            for event in w.stream(
                cluster.api.list_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL,
                field_selector=f"metadata.name={name}", resource_version=rv, timeout_seconds=tick_s, _request_timeout=(10, tick_s + 30),
            ):
                kind, changed = event.get("type"), event.get("object") or {}
                if kind == "DELETED":
                    raise CliError(gone)
                if kind == "ERROR":  # 410 Gone: the version is too old; start again from the object as it is now
                    obj = get_job(cluster, namespace, name)
                    rv = obj["metadata"].get("resourceVersion")
                    yield obj
                    break
                rv = (changed.get("metadata") or {}).get("resourceVersion", rv)
                yield changed
        except ApiException as raw:  # raised by the watch's stream itself, so read here through the edge's mapping
            if isinstance(typed(raw), Gone):
                obj = get_job(cluster, namespace, name)
                rv = obj["metadata"].get("resourceVersion")
                yield obj
                continue
            raise describe_client_error(raw, cluster.host) from None
        except HTTPError as err:
            raise describe_client_error(err, cluster.host) from None
        finally:
            w.stop()
        yield None


def kueue_objects(cluster: Cluster, job: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None] | None:
    """The Kueue Workload of a job labelled ``kueue.x-k8s.io/queue-name`` and the LocalQueue it names (``railtrain describe``).

    Returns:
        None for a job without the label (railtrain's own queue admits it); else ``(workload, local_queue)``,
        each the server's JSON object or None where there is none (or Kueue's kinds are not served).

    Raises:
        CliError: the server refused the read for another reason, or cannot be reached.
    """
    from railtrain.crds import kueue as names
    from railtrain.operator.job.workload import queue_name, workload_name

    queue = queue_name(job)
    if queue is None:
        return None
    namespace = job["metadata"].get("namespace") or ""

    def read(plural: str, name: str) -> dict[str, Any] | None:
        try:
            return call(cluster.api.get_namespaced_custom_object, names.GROUP, names.VERSION, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT)
        except NotFound:
            return None
        except (ApiError, HTTPError) as err:
            raise describe_client_error(err, cluster.host) from None

    return read(names.WORKLOADS, workload_name(job["metadata"])), read("localqueues", queue)
