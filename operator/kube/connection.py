"""The client edge, used by the operator and the command line alike: connecting, any client error in one sentence, taint updates.

Nothing here imports kopf or typer, so ``railtrain get``/``node clear`` and
the operator connect with the same kubeconfig rules, describe the same error
with the same sentence (``docs/operator.md``, "Failure modes": the operator's
dead-server sentence is ``railtrain get``'s), and change a Node's taints by
the same guarded read-modify-write.

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.config.config_exception import ConfigException

from railtrain.crds.validation import yaml_cause
from railtrain.operator.kube.errors import Conflict, NotFound, Transient, Unreachable, call, classify, one_line

__all__ = ["ApiClient", "ConnectError", "Connection", "GuardedApiClient", "connect", "describe", "patch_node", "probe", "sentence", "transient", "unreachable", "update_node"]

DEFAULT_KUBECONFIG = "~/.kube/config"
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
START_HINT = "start a local cluster with 'railtrain dev up', which prints one"
UNREACHABLE_HINT = "start a cluster with 'railtrain dev up' or point --kubeconfig/KUBECONFIG at a running one"
POOL_CONNECTIONS = 64
"""Connections to the API server kept open for reuse (the client's ``connection_pool_maxsize``; its default is
5 × CPUs, 10 on a 2-CPU machine). urllib3 opens a connection beyond the pool when every kept one is in use and
closes it after one request, so each request beyond the pool pays a TLS handshake on both ends. The operator holds
up to five watches, 8 kopf handler threads, 4 admission deciders, 16 pod creators and 8 API callers at once
(:data:`railtrain.operator.kube.pool.CREATE_CONCURRENCY` and the pools beside it): a py-spy profile of 100 jobs × 8 pods
on the default pool found TLS handshakes in most pod creates."""
NOT_A_KUBECONFIG = "it is not a kubeconfig (a YAML mapping whose clusters, contexts and users are lists of named entries)"


LEASES_PATH = "/apis/coordination.k8s.io/"
"""Requests under this path (the Lease) are never fenced: they are how leadership is won and kept."""


class GuardedApiClient(client.ApiClient):
    """An ``ApiClient`` whose every call without its own ``_request_timeout`` gets ``request_timeout``, and whose
    every write (any method but GET/HEAD, the Lease excepted) first passes ``fence``.

    The official client waits forever by default: a call to an API server that
    accepted the connection and then stopped answering (frozen, overloaded, a
    half-open connection) never returns, and the thread that made it never
    notices anything. Every generated API method goes through :meth:`call_api`,
    so this is the one place a deadline applies to all of them: the operator's
    reads and writes, its Lease calls (which pass a shorter one), and its
    informers' LISTs (their WATCHes pass their own, longer than the server-side
    ``timeoutSeconds``). It is also the last moment before a write is sent, where
    the operator's leadership check runs once more (docs/operator.md, "Leader
    fencing"): a process frozen after its write verb checked the fence but before
    the request left is stopped here when it resumes.

    Args:
        configuration: the client configuration.
        request_timeout: seconds, or ``(connect, read)`` seconds, as ``_request_timeout`` takes them.
        fence: called before every write; raises to refuse it (None: none).
    """

    def __init__(self, configuration: client.Configuration, request_timeout: float | tuple[float, float], fence: Callable[[], None] | None = None):
        super().__init__(configuration)
        self.request_timeout = request_timeout
        self.fence = fence

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):  # noqa: D102 (the client's own)
        if self.fence is not None and method not in ("GET", "HEAD") and LEASES_PATH not in url:
            self.fence()
        return super().call_api(
            method, url, header_params=header_params, body=body, post_params=post_params,
            _request_timeout=self.request_timeout if _request_timeout is None else _request_timeout,
        )


class ConnectError(Exception):
    """No usable kubeconfig or in-cluster credentials; ``str()`` is one sentence naming where the kubeconfig came from."""


@dataclass(frozen=True)
class Connection:
    """A configured client; nothing has been sent yet.

    Attributes:
        api: the ``kubernetes.client.ApiClient``.
        namespace: the namespace of the kubeconfig's current context (``default`` when unset), or the pod's own in a cluster.
        host: the API server URL, for sentences.
    """

    api: client.ApiClient
    namespace: str
    host: str


def missing_kubeconfig(kubeconfig: str | None, path: str, environ: Mapping[str, str]) -> str:
    """The sentence for a kubeconfig that does not exist, naming where its path came from.

    ``kubeconfig`` None or equal to ``$KUBECONFIG`` came from the environment
    (typer fills the CLI's option from it): the advice is then about that
    variable, not to set it.
    """
    if environ.get("KUBECONFIG") and kubeconfig in (None, environ["KUBECONFIG"]):
        return f"KUBECONFIG: no kubeconfig file at {path}; point KUBECONFIG at an existing file or unset it (its cluster may be gone: {START_HINT})"
    if kubeconfig is None:
        return f"no kubeconfig file at {path} and no in-cluster credentials; pass --kubeconfig PATH or set KUBECONFIG ({START_HINT})"
    return f"--kubeconfig: no kubeconfig file at {path}; pass --kubeconfig PATH or set KUBECONFIG ({START_HINT})"


def connect(
    kubeconfig: str | None = None, environ: Mapping[str, str] | None = None, request_timeout: float | tuple[float, float] | None = None,
    fence: Callable[[], None] | None = None,
) -> Connection:
    """Load credentials from a kubeconfig, else the in-cluster service account.

    Args:
        kubeconfig: path(s) of kubeconfig files, ``os.pathsep``-separated as in
            ``KUBECONFIG``; None means ``$KUBECONFIG``, then ``~/.kube/config``,
            then in-cluster credentials.
        environ: the environment (default ``os.environ``).
        request_timeout: when given, every call that names no ``_request_timeout`` of its own waits at most this
            long (seconds, or ``(connect, read)`` seconds; :class:`GuardedApiClient`), and a call that got no
            answer in time is not sent again by urllib3 (its caller's loop retries), so no call waits longer.
            None: the client's defaults (no timeout; the command line passes one per call).
        fence: with ``request_timeout``: called right before every write is sent (:class:`GuardedApiClient`).

    Returns:
        A :class:`Connection`.

    Raises:
        ConnectError: no kubeconfig exists, or it is unreadable, not YAML, not
            shaped like a kubeconfig, or otherwise cannot be used.
    """
    env = os.environ if environ is None else environ
    cfg = client.Configuration()
    path = kubeconfig or env.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    namespace = "default"
    if any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p):
        try:
            config.load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)
            _, current = config.list_kube_config_contexts(config_file=path)
        except (ConfigException, OSError, ValueError) as err:
            raise ConnectError(f"kubeconfig {path} cannot be used: {one_line(err)}") from None
        except yaml.YAMLError as err:
            raise ConnectError(f"kubeconfig {path} cannot be used: not valid YAML{yaml_cause(err)}") from None
        except (TypeError, AttributeError, KeyError):  # the client's loader indexes the YAML without checking its shape
            raise ConnectError(f"kubeconfig {path} cannot be used: {NOT_A_KUBECONFIG}") from None
        namespace = ((current or {}).get("context") or {}).get("namespace") or namespace
    elif not kubeconfig and not env.get("KUBECONFIG") and IN_CLUSTER_TOKEN.is_file():
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException as err:
            raise ConnectError(f"in-cluster credentials cannot be used: {one_line(err)}") from None
        if IN_CLUSTER_NAMESPACE.is_file():
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip() or namespace
    else:
        raise ConnectError(missing_kubeconfig(kubeconfig, path, env))
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, POOL_CONNECTIONS)
    if request_timeout is None:
        return Connection(client.ApiClient(cfg), namespace, cfg.host)
    # urllib3's default retries a read timeout of a GET/PUT/DELETE 3 more times: 4 x the timeout per call.
    cfg.retries = urllib3.Retry(total=3, read=0, redirect=3)
    return Connection(GuardedApiClient(cfg, request_timeout, fence), namespace, cfg.host)


def probe(api: ApiClient, timeout_seconds: float = 10) -> None:
    """Make the cheapest read the operator is allowed (a namespace list of one item, body not decoded).

    Args:
        api: a connected client (:func:`connect`'s ``.api``).
        timeout_seconds: the call's own timeout.

    Raises:
        Whatever the client raised (``ApiException``, urllib3 errors): callers sort it with
        :func:`unreachable`, :func:`transient` and :func:`describe`.
    """
    client.CoreV1Api(api).list_namespace(limit=1, _request_timeout=timeout_seconds, _preload_content=False)


def describe(err: BaseException) -> str:
    """Any error of a call to the API server as a short phrase for a log line: ``429 storage is (re)initializing``, ``connection refused``."""
    answer = classify(err)
    if answer is not None:
        return str(answer)
    text = str(getattr(err, "reason", None) or err)
    if "refused" in text.lower():
        return "connection refused"
    if isinstance(err, (TimeoutError, urllib3.exceptions.TimeoutError)) or "timed out" in text.lower():
        return "no answer in time"
    line = one_line(f"{type(err).__name__}: {text}")
    return line if len(line) <= 200 else line[:197] + "..."


def unreachable(err: BaseException) -> bool:
    """Whether an error means the API server did not answer at all (refused, reset, timed out, DNS): urllib3's or the
    socket's own error, or the typed :class:`~railtrain.operator.kube.errors.Unreachable` (an ApiException of status 0)."""
    return isinstance(err, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, socket.gaierror)) or isinstance(classify(err), Unreachable)


def transient(err: BaseException) -> bool:
    """Whether an error of a call is worth retrying as it is: 429, 5xx, or no answer at all
    (:class:`~railtrain.operator.kube.errors.Transient`); a refusal of the request itself (other 4xx) is not."""
    answer = classify(err)
    return isinstance(answer, Transient) if answer is not None else unreachable(err)


def sentence(err: BaseException, host: str | None = None) -> str:
    """Any client error as one sentence for a person, with what to do.

    Args:
        err: a typed :class:`~railtrain.operator.kube.errors.ApiError` (or the ``ApiException`` it maps),
            ``ConfigException``, urllib3 error or connection error.
        host: the API server URL, when known.
    """
    where = f" at {host}" if host else ""
    if isinstance(err, urllib3.exceptions.MaxRetryError):
        host = host or _url_of(err)
        where = f" at {host}" if host else ""
        reason = err.reason
        if isinstance(reason, urllib3.exceptions.NewConnectionError) and "refused" in str(reason).lower():
            return f"cannot reach the Kubernetes API server{where}: connection refused; {UNREACHABLE_HINT}"
        if isinstance(reason, urllib3.exceptions.TimeoutError):
            return f"the Kubernetes API server{where} did not answer in time; check that the cluster is up"
        return f"cannot reach the Kubernetes API server{where}: {one_line(reason or err)}; {UNREACHABLE_HINT}"
    if isinstance(err, urllib3.exceptions.TimeoutError):
        return f"the Kubernetes API server{where} did not answer in time; check that the cluster is up"
    answer = classify(err)
    if answer is not None:
        return answer.sentence(host)
    if isinstance(err, ConfigException):
        return f"the kubeconfig cannot be used: {one_line(err)}"
    if unreachable(err):
        return f"cannot reach the Kubernetes API server{where}: {describe(err)}; {UNREACHABLE_HINT}"
    return f"Kubernetes client error{where}: {one_line(err)}"


def _url_of(err: urllib3.exceptions.MaxRetryError) -> str:
    pool = getattr(err, "pool", None)
    if pool is None or not getattr(pool, "host", None):
        return ""
    return f"{pool.scheme}://{pool.host}:{pool.port}"


def patch_node(
    core: client.CoreV1Api,
    node: dict[str, Any],
    taints: list[dict[str, Any]] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
    field_manager: str | None = None,
    timeout: Any = None,
) -> bool:
    """Change a Node read earlier, guarded by its resourceVersion (RBAC: ``patch`` on nodes).

    One JSON merge patch replaces ``spec.taints`` (when ``taints`` is not
    None) and sets or, with None values, removes ``annotations`` and
    ``labels``. It carries the node's resourceVersion, so it fails with 409
    when the node changed since it was read, and a concurrent change is never
    overwritten (Kubernetes API conventions, optimistic concurrency).

    Returns:
        False on a conflict or when the node is gone (read it again and retry).

    Raises:
        railtrain.operator.kube.errors.ApiError: any other refusal.
    """
    meta: dict[str, Any] = {"resourceVersion": node["metadata"].get("resourceVersion")}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    body: dict[str, Any] = {"metadata": meta} | ({"spec": {"taints": taints}} if taints is not None else {})
    extra: dict[str, Any] = {"field_manager": field_manager} if field_manager else {}
    if timeout is not None:
        extra["_request_timeout"] = timeout
    try:
        call(core.patch_node, node["metadata"]["name"], body, _content_type="application/merge-patch+json", _preload_content=False, **extra)
    except (NotFound, Conflict):
        return False
    return True


def update_node(
    read: Callable[[], dict[str, Any] | None],
    write: Callable[..., bool],
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
    attempts: int = 5,
) -> tuple[str, dict[str, Any] | None]:
    """Read a Node, compute its change, write it guarded by its resourceVersion; read again and retry on conflict.

    The one read-modify-write of Nodes: the operator's quarantine and
    ``railtrain node clear`` both go through it.

    Args:
        read: returns the Node (a dict), or None when it does not exist.
        write: ``write(node, **change)``, e.g. :func:`patch_node` bound to a client: False on conflict or gone.
        change: the keyword arguments of ``write`` for the node as read (``taints``, ``annotations``, ``labels``),
            or None when nothing is to change.
        attempts: reads before giving up on a node that keeps changing.

    Returns:
        ``(outcome, node as last read)``: outcome ``"changed"``, ``"unchanged"``
        (``change`` returned None), ``"gone"`` (no such node) or ``"conflict"``
        (it kept changing for ``attempts`` reads).
    """
    node = None
    for _ in range(attempts):
        node = read()
        if node is None:
            return "gone", None
        what = change(node)
        if what is None:
            return "unchanged", node
        if write(node, **what):
            return "changed", node
    return "conflict", node
