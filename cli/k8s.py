"""The cluster side of the command line: connecting, and TrainingJob create/get/list.

Everything here talks to kube-apiserver through the official ``kubernetes``
client (``CustomObjectsApi``). Client failures are translated at this boundary
into :class:`~railtrain.cli.errors.CliError` sentences that say what happened and
what to do (install the CRD, start a cluster, pick another name), because only
here is the intent of the request known: a 404 on create means the CRD is
missing, a 404 on get means the job is.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError, MaxRetryError, NewConnectionError, TimeoutError as Urllib3Timeout

from railtrain.cli.errors import CliError
from railtrain.crds import contract

DEFAULT_KUBECONFIG = "~/.kube/config"
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
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
    """Load credentials from a kubeconfig (or the in-cluster service account).

    Args:
        kubeconfig: path(s) of kubeconfig files, ``os.pathsep``-separated as in
            ``KUBECONFIG``; ``None`` means ``~/.kube/config``, then in-cluster.

    Returns:
        A :class:`Cluster`; nothing is sent to the server yet.

    Raises:
        CliError: no kubeconfig exists, or it is unreadable, not YAML, not
            shaped like a kubeconfig, or otherwise cannot be used.
    """
    cfg = client.Configuration()
    path = kubeconfig or DEFAULT_KUBECONFIG
    paths = [Path(p).expanduser() for p in path.split(os.pathsep) if p]
    namespace = "default"
    if any(p.is_file() for p in paths):
        try:
            config.load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)
            _, current = config.list_kube_config_contexts(config_file=path)
        except (ConfigException, OSError, ValueError) as err:
            raise CliError(f"kubeconfig {path} cannot be used: {_one_line(err)}") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise CliError(f"kubeconfig {path} cannot be used: not valid YAML{where}") from None
        except (TypeError, AttributeError, KeyError):  # the client's loader indexes the YAML without checking its shape
            raise CliError(
                f"kubeconfig {path} cannot be used: it is not a kubeconfig (a YAML mapping whose clusters, contexts and users are lists of named entries)"
            ) from None
        namespace = (current or {}).get("context", {}).get("namespace") or namespace
    elif kubeconfig is None and IN_CLUSTER_TOKEN.is_file():
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException as err:
            raise CliError(f"in-cluster credentials cannot be used: {_one_line(err)}") from None
        if IN_CLUSTER_NAMESPACE.is_file():
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip() or namespace
    else:
        raise CliError(_missing_kubeconfig(kubeconfig, path, os.environ))
    return Cluster(api=client.CustomObjectsApi(client.ApiClient(cfg)), namespace=namespace, host=cfg.host)


def _missing_kubeconfig(kubeconfig: str | None, path: str, environ: Mapping[str, str]) -> str:
    """The sentence for a kubeconfig that does not exist, naming where the path came from.

    ``kubeconfig`` equal to ``$KUBECONFIG`` came from the environment (typer
    fills the option from it): the advice is then about that variable, not to set it.
    """
    start = "start a local cluster with 'railtrain dev up', which prints one"
    if kubeconfig is not None and environ.get("KUBECONFIG") == kubeconfig:
        return f"KUBECONFIG: no kubeconfig file at {path}; point KUBECONFIG at an existing file or unset it (its cluster may be gone: {start})"
    if kubeconfig is None:
        return f"no kubeconfig file at {path}; pass --kubeconfig PATH or set KUBECONFIG ({start})"
    return f"--kubeconfig: no kubeconfig file at {path}; pass --kubeconfig PATH or set KUBECONFIG ({start})"


def create_job(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a TrainingJob with strict field validation (unknown fields are refused, as kubectl does).

    Args:
        cluster: the connection.
        namespace: the target namespace; ``body``'s ``metadata.namespace`` is set to it.
        body: the manifest as a mapping.

    Returns:
        The created object as the server stored it.

    Raises:
        CliError: the server refused the object (each field cause becomes a
            sentence), the name is taken, the namespace or CRD is missing, or the
            server cannot be reached.
    """
    name = (body.get("metadata") or {}).get("name", "?")
    body = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": namespace}}
    try:
        return cluster.api.create_namespaced_custom_object(
            contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, body,
            field_validation="Strict", _request_timeout=REQUEST_TIMEOUT,
        )
    except ApiException as err:
        status = _status_body(err)
        if err.status == 409:
            raise CliError(
                f"trainingjob {name} already exists in namespace {namespace}; delete it first "
                f"('kubectl delete trainingjob {name} -n {namespace}') or choose another metadata.name"
            ) from None
        if err.status == 404:
            if (status.get("details") or {}).get("kind") == "namespaces":
                raise CliError(f"--namespace: namespace {namespace} does not exist; create it with 'kubectl create namespace {namespace}'") from None
            raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
        if err.status in (400, 422):
            raise CliError(*refusal_sentences(name, status, err)) from None
        raise describe_client_error(err, cluster.host) from None
    except HTTPError as err:
        raise describe_client_error(err, cluster.host) from None


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """Read one TrainingJob.

    Raises:
        CliError: the job or the CRD does not exist, or the server cannot be reached.
    """
    try:
        return cluster.api.get_namespaced_custom_object(
            contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as err:
        if err.status == 404:
            if _status_body(err).get("reason") == "NotFound":
                raise CliError(f"trainingjob {name} not found in namespace {namespace}") from None
            raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
        raise describe_client_error(err, cluster.host) from None
    except HTTPError as err:
        raise describe_client_error(err, cluster.host) from None


def rank_pod(cluster: Cluster, namespace: str, job: str, rank: int = 0) -> dict[str, Any] | None:
    """Read the pod of one rank (``<job>-<rank>``), or None when it does not exist or cannot be read (best effort, for views).

    Raises:
        nothing: any API or connection error gives None (the job view is shown without it).
    """
    try:
        pod = client.CoreV1Api(cluster.api.api_client).read_namespaced_pod(contract.pod_name(job, rank), namespace, _request_timeout=REQUEST_TIMEOUT)
    except (ApiException, HTTPError):
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
            result = cluster.api.list_cluster_custom_object(
                contract.API_GROUP, contract.API_VERSION, contract.PLURAL, _request_timeout=REQUEST_TIMEOUT
            )
        else:
            result = cluster.api.list_namespaced_custom_object(
                contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, _request_timeout=REQUEST_TIMEOUT
            )
    except ApiException as err:
        if err.status == 404:
            raise CliError(f"the TrainingJob CRD ({RESOURCE}) is not installed in the cluster at {cluster.host}; {CRD_HINT}") from None
        raise describe_client_error(err, cluster.host) from None
    except HTTPError as err:
        raise describe_client_error(err, cluster.host) from None
    items = list(result.get("items") or [])
    return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def refusal_sentences(name: str, status: dict[str, Any], err: ApiException | None = None) -> list[str]:
    """One sentence per field cause of a 400/422 Status from the API server.

    Args:
        name: the job's name, for the sentence.
        status: the decoded ``Status`` body (``{}`` when the body was not JSON).
        err: the exception, whose reason is used when ``status`` says nothing.

    Returns:
        ``"the API server refused trainingjob NAME: <field>: <message>"`` per cause,
        or one sentence with the Status message when it lists no causes.
    """
    prefix = f"the API server refused trainingjob {name}"
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
        out.append(f"{prefix}: {_one_line(message)}")
    return out


def describe_client_error(err: BaseException, host: str | None = None) -> CliError:
    """Translate any Kubernetes client or urllib3 exception into one sentence.

    Args:
        err: an ``ApiException``, ``ConfigException`` or urllib3 ``HTTPError``.
        host: the API server URL, when known.

    Returns:
        A :class:`CliError` (exit status 1).
    """
    where = f" at {host}" if host else ""
    if isinstance(err, MaxRetryError):
        host = host or _url_of(err)
        where = f" at {host}" if host else ""
        reason = err.reason
        if isinstance(reason, NewConnectionError) and "refused" in str(reason).lower():
            return CliError(
                f"cannot reach the Kubernetes API server{where}: connection refused; start a cluster with "
                "'railtrain dev up' or point --kubeconfig/KUBECONFIG at a running one"
            )
        if isinstance(reason, Urllib3Timeout):
            return CliError(f"the Kubernetes API server{where} did not answer in time; check that the cluster is up")
        return CliError(f"cannot reach the Kubernetes API server{where}: {_one_line(reason or err)}")
    if isinstance(err, Urllib3Timeout):
        return CliError(f"the Kubernetes API server{where} did not answer in time; check that the cluster is up")
    if isinstance(err, ApiException):
        status = _status_body(err)
        message = _one_line(status.get("message") or err.reason or "")
        if err.status == 0:
            return CliError(f"cannot talk to the Kubernetes API server{where}: {message}")
        if err.status == 401:
            return CliError(f"the Kubernetes API server{where} rejected the kubeconfig's credentials (401 Unauthorized)")
        if err.status == 403:
            return CliError(f"not allowed by the Kubernetes API server{where}: {message}")
        return CliError(f"the Kubernetes API server{where} answered {err.status} {err.reason}: {message}")
    if isinstance(err, ConfigException):
        return CliError(f"the kubeconfig cannot be used: {_one_line(err)}")
    return CliError(f"Kubernetes client error{where}: {_one_line(err)}")


def _status_body(err: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _url_of(err: MaxRetryError) -> str:
    pool = getattr(err, "pool", None)
    if pool is None or not getattr(pool, "host", None):
        return ""
    return f"{pool.scheme}://{pool.host}:{pool.port}"


def _one_line(obj: object) -> str:
    return " ".join(str(obj).split())


def clear_quarantine(cluster: Cluster, node: str) -> str | None:
    """Remove the quarantine (the ``railtrain.dev/quarantined`` taint, label and ``-at`` annotation) from ``node``.

    Whether the node is quarantined is the same test placement uses
    (:func:`railtrain.operator.quarantine.quarantined_by`). A merge patch
    carrying the node's resourceVersion replaces ``spec.taints``, so a
    concurrent taint change is never overwritten (retried on conflict).

    Returns:
        What quarantined it (the taint's verdict, or "label"), or None when the node was not quarantined.

    Raises:
        CliError: the node does not exist, or the patch was refused.
    """
    from railtrain.operator.quarantine import ANNOTATION_AT, LABEL_KEY, quarantined_by, taints_without

    core = client.CoreV1Api(cluster.api.api_client)
    for _ in range(5):
        try:
            obj = json.loads(core.read_node(node, _preload_content=False, _request_timeout=REQUEST_TIMEOUT).data)
        except ApiException as err:
            if err.status == 404:
                raise CliError(f"node {node} does not exist (kubectl get nodes lists them)", exit_code=1) from None
            raise
        was = quarantined_by(obj)
        if was is None:
            return None
        taints = taints_without(obj)
        meta: dict[str, object] = {"resourceVersion": obj["metadata"]["resourceVersion"], "annotations": {ANNOTATION_AT: None}}
        if LABEL_KEY in (obj["metadata"].get("labels") or {}):
            meta["labels"] = {LABEL_KEY: None}
        body = {"metadata": meta, "spec": {"taints": taints}} if taints is not None else {"metadata": meta}
        try:
            core.patch_node(node, body, _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)
            return was
        except ApiException as err:
            if err.status != 409:
                raise
    raise CliError(f"node {node} kept changing while its quarantine taint was being removed; try again", exit_code=1)


def quarantined_nodes(cluster: Cluster) -> list[tuple[str, str]]:
    """``(node, verdict)`` of every quarantined node (:func:`railtrain.operator.quarantine.quarantined_by`: the taint,
    whose value is the verdict, or the label), sorted by name."""
    from railtrain.operator.quarantine import quarantined_by

    core = client.CoreV1Api(cluster.api.api_client)
    items = json.loads(core.list_node(_preload_content=False, _request_timeout=REQUEST_TIMEOUT).data)["items"]
    return sorted((n["metadata"]["name"], why) for n in items if (why := quarantined_by(n)) is not None)
