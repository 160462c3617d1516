"""The cluster side of the command line: connecting, and TrainingJob create/get/list.

Everything here talks to kube-apiserver through the official ``kubernetes``
client (``CustomObjectsApi``); connecting, error sentences and taint updates
are the client edge the operator uses too (:mod:`railtrain.operator.kube.connection`,
which imports neither kopf nor typer). Client failures are translated at this boundary
into :class:`~railtrain.cli.errors.CliError` sentences that say what happened and
what to do (install the CRD, start a cluster, pick another name), because only
here is the intent of the request known: a 404 on create means the CRD is
missing, a 404 on get means the job is. The client's errors are read through
the API edge's mapping (:mod:`railtrain.operator.kube.errors`: :func:`~railtrain.operator.kube.errors.call`
raises :class:`~railtrain.operator.kube.errors.NotFound`, :class:`~railtrain.operator.kube.errors.Conflict`,
:class:`~railtrain.operator.kube.errors.Invalid` ...), the same the operator reads them through.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from railtrain.cli.errors import CliError
from railtrain.crds import contract
from railtrain.operator.kube import connection
from railtrain.operator.kube.errors import ApiError, Conflict, Invalid, NotFound, call, one_line, or_none, status_body

REQUEST_TIMEOUT = (10, 60)
"""Connect and read timeouts of every request, in seconds."""
RESOURCE = f"{contract.PLURAL}.{contract.API_GROUP}"
_OBJECT_VALUE = re.compile(r'^(<nil>: )?Invalid value: "object": ')
CRD_HINT = "install it with 'kubectl apply -f crds/trainingjob.yaml' (or 'railtrain dev up' for a local cluster)"


@dataclass
class Cluster:
    """A connection to one cluster.

    Attributes:
        api: the CustomObjectsApi bound to the configured client.
        namespace: the namespace of the kubeconfig's current context ("default" when unset).
        host: the API server URL, for messages.
    """

    api: client.CustomObjectsApi
    namespace: str
    host: str


def connect(kubeconfig: str | None) -> Cluster:
    """Load credentials from a kubeconfig (or the in-cluster service account), as the operator does.

    Args:
        kubeconfig: path(s) of kubeconfig files, ``os.pathsep``-separated as in
            ``KUBECONFIG``; ``None`` means ``~/.kube/config``, then in-cluster.

    Returns:
        A :class:`Cluster`; nothing is sent to the server yet.

    Raises:
        CliError: no kubeconfig exists, or it is unreadable, not YAML, not
            shaped like a kubeconfig, or otherwise cannot be used
            (:func:`railtrain.operator.kube.connection.connect`'s sentence).
    """
    try:
        conn = connection.connect(kubeconfig)
    except connection.ConnectError as err:
        raise CliError(str(err)) from None
    return Cluster(api=client.CustomObjectsApi(conn.api), namespace=conn.namespace, host=conn.host)


def create_job(cluster: Cluster, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Create a TrainingJob with strict field validation (unknown fields are refused, as kubectl does).

    Args:
        cluster: the connection.
        namespace: the target namespace; ``body``'s ``metadata.namespace`` is set to it.
        body: the manifest as a mapping.
        dry_run: a server-side dry run (``dryRun=All``): every check and default of a create, nothing stored.

    Returns:
        The created object as the server stored it (or would store it, on a dry run).

    Raises:
        CliError: the server refused the object (each field cause becomes a
            sentence), the name is taken, the namespace or CRD is missing, or the
            server cannot be reached.
    """
    name = (body.get("metadata") or {}).get("name", "?")
    body = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": namespace}}
    try:
        return call(
            cluster.api.create_namespaced_custom_object,
            contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, body,
            field_validation="Strict", _request_timeout=REQUEST_TIMEOUT, **({"dry_run": "All"} if dry_run else {}),
        )
    except Conflict:
        raise CliError(
            f"trainingjob {name} already exists in namespace {namespace}; delete it first "
            f"('railtrain delete {name} -n {namespace}') or choose another metadata.name"
        ) from None
    except NotFound as err:
        if (err.details.get("details") or {}).get("kind") == "namespaces":
            raise CliError(f"--namespace: namespace {namespace} does not exist; create it with 'kubectl create namespace {namespace}'") from None
        raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
    except Invalid as err:
        raise CliError(*refusal_sentences(name, err.details, err)) from None
    except (ApiError, HTTPError) as err:
        raise describe_client_error(err, cluster.host) from None


def dry_run_pod(cluster: Cluster, namespace: str, pod: dict[str, Any], job: str) -> list[str]:
    """Ask the API server whether it would create ``pod`` (a server-side dry run with strict field validation).

    The pod-level rules (names, volumes, probes, ports: what ``spec.template`` adds to a pod) are the API server's,
    applied when the operator creates the gang; this asks them now.

    Args:
        cluster: the connection.
        namespace: where the pod would be created.
        pod: a pod as the operator renders it (:func:`railtrain.operator.job.render.render_pod`).
        job: the job's name, for the sentences.

    Returns:
        One sentence per cause the server gave (``"the API server would refuse the pods of trainingjob NAME: <field>:
        <message>"``); empty when it would create the pod.

    Raises:
        CliError: the namespace does not exist, or the server cannot be reached or refused for another reason.
    """
    try:
        call(client.CoreV1Api(cluster.api.api_client).create_namespaced_pod, namespace, pod, dry_run="All", field_validation="Strict", _request_timeout=REQUEST_TIMEOUT)
    except Invalid as err:
        return refusal_sentences(job, err.details, err, prefix=f"the API server would refuse the pods of trainingjob {job} (spec.template is merged into them)")
    except (ApiError, HTTPError) as err:
        if isinstance(err, NotFound) and (err.details.get("details") or {}).get("kind") == "namespaces":
            raise CliError(f"--namespace: namespace {namespace} does not exist; create it with 'kubectl create namespace {namespace}'") from None
        raise describe_client_error(err, cluster.host) from None
    return []


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """Read one TrainingJob.

    Raises:
        CliError: the job or the CRD does not exist, or the server cannot be reached.
    """
    try:
        return call(cluster.api.get_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
    except NotFound as err:
        if err.details.get("reason") == "NotFound":
            raise CliError(f"trainingjob {name} not found in namespace {namespace}") from None
        raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
    except (ApiError, HTTPError) as err:
        raise describe_client_error(err, cluster.host) from None


def rank_pod(cluster: Cluster, namespace: str, job: str, rank: int = 0) -> dict[str, Any] | None:
    """Read the pod of one rank (``<job>-<rank>``), or None when it does not exist or cannot be read (best effort, for views).

    Raises:
        nothing: any API or connection error gives None (the job view is shown without it).
    """
    try:
        pod = call(client.CoreV1Api(cluster.api.api_client).read_namespaced_pod, contract.pod_name(job, rank), namespace, _request_timeout=REQUEST_TIMEOUT)
    except (ApiError, HTTPError):
        return None
    return cluster.api.api_client.sanitize_for_serialization(pod)


def list_jobs(cluster: Cluster, namespace: str | None) -> list[dict[str, Any]]:
    """List TrainingJobs in ``namespace``, or in every namespace when it is ``None``.

    Returns:
        The items, sorted by namespace then name.

    Raises:
        CliError: the CRD does not exist, or the server cannot be reached.
    """
    try:
        if namespace is None:
            result = call(cluster.api.list_cluster_custom_object, contract.API_GROUP, contract.API_VERSION, contract.PLURAL, _request_timeout=REQUEST_TIMEOUT)
        else:
            result = call(cluster.api.list_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, _request_timeout=REQUEST_TIMEOUT)
    except NotFound:
        raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
    except (ApiError, HTTPError) as err:
        raise describe_client_error(err, cluster.host) from None
    items = list(result.get("items") or [])
    return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def refusal_sentences(name: str, status: dict[str, Any], err: ApiError | None = None, prefix: str | None = None) -> list[str]:
    """One sentence per field cause of a 400/422 Status from the API server.

    Args:
        name: the job's name, for the sentence.
        status: the decoded ``Status`` body (``{}`` when the body was not JSON).
        err: the API's error (:class:`~railtrain.operator.kube.errors.Invalid`), whose reason is used when ``status`` says nothing.
        prefix: what each sentence starts with; default ``"the API server refused trainingjob NAME"``.

    Returns:
        ``"<prefix>: <field>: <message>"`` per cause,
        or one sentence with the Status message when it lists no causes.
    """
    prefix = prefix or f"the API server refused trainingjob {name}"
    causes = (status.get("details") or {}).get("causes") or []
    out = []
    for cause in causes:
        field = cause.get("field") or ""
        message = " ".join(str(cause.get("message") or cause.get("reason") or "invalid").split())
        # CEL rules on an object report its value as "object"; our rule messages start with their own field path.
        message = _OBJECT_VALUE.sub("", message)
        out.append(f"{prefix}: {message}" if not field or field in message else f"{prefix}: {field}: {message}")
    if not out:
        message = status.get("message") or (err.reason if err is not None else "") or "invalid object"
        out.append(f"{prefix}: {one_line(message)}")
    return out


def describe_client_error(err: BaseException, host: str | None = None) -> CliError:
    """Translate any Kubernetes client or urllib3 exception into one sentence (:func:`railtrain.operator.kube.connection.sentence`).

    Args:
        err: a typed :class:`~railtrain.operator.kube.errors.ApiError` (or the client's error it maps),
            ``ConfigException`` or urllib3 ``HTTPError``.
        host: the API server URL, when known.

    Returns:
        A :class:`CliError` (exit status 1).
    """
    return CliError(connection.sentence(err, host))


_status_body = status_body


def clear_quarantine(cluster: Cluster, node: str) -> str | None:
    """Remove the quarantine (the ``railtrain.dev/quarantined`` taint, label and ``-at`` annotation) from ``node``.

    Whether the node is quarantined is the same test placement uses
    (:func:`railtrain.operator.scheduling.quarantine.quarantined_by`). The operator's guarded
    read-modify-write (:func:`railtrain.operator.kube.connection.update_node`) removes
    the taint, label and annotation in one merge patch carrying the node's
    resourceVersion, so a concurrent change is never overwritten (retried on conflict).

    Returns:
        What quarantined it (the taint's verdict, or "label"), or None when the node was not quarantined.

    Raises:
        CliError: the node does not exist, or kept changing.
    """
    from railtrain.operator.scheduling.quarantine import ANNOTATION_AT, LABEL_KEY, quarantined_by, taints_without

    core = client.CoreV1Api(cluster.api.api_client)

    def read() -> dict[str, Any] | None:
        res = or_none(core.read_node, node, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return None if res is None else json.loads(res.data)

    def change(obj: dict[str, Any]) -> dict[str, Any] | None:
        if quarantined_by(obj) is None:
            return None
        labels = {LABEL_KEY: None} if LABEL_KEY in (obj["metadata"].get("labels") or {}) else None
        return {"taints": taints_without(obj), "annotations": {ANNOTATION_AT: None}, "labels": labels}

    outcome, obj = connection.update_node(read, lambda n, **what: connection.patch_node(core, n, timeout=REQUEST_TIMEOUT, **what), change)
    if outcome == "gone":
        raise CliError(f"node {node} does not exist (kubectl get nodes lists them)", exit_code=1)
    if outcome == "conflict":
        raise CliError(f"node {node} kept changing while its quarantine taint was being removed; try again", exit_code=1)
    return None if outcome == "unchanged" else quarantined_by(obj)


def quarantined_nodes(cluster: Cluster) -> list[tuple[str, str]]:
    """``(node, verdict)`` of every quarantined node (:func:`railtrain.operator.scheduling.quarantine.quarantined_by`: the taint,
    whose value is the verdict, or the label), sorted by name."""
    from railtrain.operator.scheduling.quarantine import quarantined_by

    core = client.CoreV1Api(cluster.api.api_client)
    items = json.loads(core.list_node(_preload_content=False, _request_timeout=REQUEST_TIMEOUT).data)["items"]
    return sorted((n["metadata"]["name"], why) for n in items if (why := quarantined_by(n)) is not None)
