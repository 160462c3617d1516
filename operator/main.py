"""Run the railtrain operator in the foreground (``railtrain operator`` / ``railtrain-operator``)."""

from __future__ import annotations

import logging
import os
import time

import kopf
import prometheus_client
import yaml
from kubernetes import client, config

from railtrain.crds import fabric
from railtrain.operator import handlers, kube, metrics, topology

log = logging.getLogger("railtrain.operator")

STARTUP_WAIT_SECONDS = 60.0
"""How long the first request may keep getting 429/5xx (an API server still starting) before the operator gives up."""


class OperatorError(Exception):
    """The operator cannot start or had to stop; ``str()`` is one sentence for the user (exit status 1)."""


def run(
    namespace: str | None = None,
    kubeconfig: str | None = None,
    resync_seconds: float = 2.0,
    topology_preset: str | None = None,
    topology_levels: str | None = None,
    unreachable_seconds: float = 60.0,
    fabric_profile: str | None = None,
) -> None:
    """Run the operator until interrupted (SIGINT/SIGTERM stop it cleanly).

    Args:
        namespace: watch only this namespace; None watches the whole cluster.
        kubeconfig: kubeconfig path; None uses $KUBECONFIG, ~/.kube/config or in-cluster config.
        resync_seconds: period of the level-triggered resync of unfinished jobs.
        topology_preset: a preset of :data:`railtrain.operator.topology.PRESETS`;
            None reads $RAILTRAIN_TOPOLOGY_PRESET, else ``railtrain``.
        topology_levels: comma-separated node label keys, widest first; overrides
            the preset; None reads $RAILTRAIN_TOPOLOGY_LEVELS.
        unreachable_seconds: stop once the API server has not answered any
            resync for this long (seconds).
        fabric_profile: a profile of :data:`railtrain.crds.fabric.PROFILES`;
            None reads $RAILTRAIN_FABRIC_PROFILE, else ``railtrain``.

    Raises:
        ValueError: an unknown preset or fabric profile, or a malformed level list (before anything starts).
        OperatorError: no usable kubeconfig, or the API server cannot be reached
            or refuses the credentials (before anything starts); or the API
            server stopped answering for ``unreachable_seconds`` while running.
    """
    levels = topology.resolve_levels(topology_preset, topology_levels, os.environ)
    profile = fabric.resolve_profile(fabric_profile, os.environ)
    if kubeconfig:
        # kopf's default login handler and our client both read $KUBECONFIG.
        os.environ["KUBECONFIG"] = kubeconfig
    handlers.OperatorConfig.kubeconfig = kubeconfig
    handlers.OperatorConfig.namespace = namespace
    handlers.OperatorConfig.resync_seconds = resync_seconds
    handlers.OperatorConfig.unreachable_seconds = unreachable_seconds
    handlers.OperatorConfig.topology_levels = levels
    handlers.OperatorConfig.fabric = profile
    handlers.OperatorConfig.fatal = None
    handlers.OperatorConfig.stop.clear()
    configure_logging()
    handlers.OperatorConfig.kube = kube.Kube(preflight(kubeconfig))
    log.info("topology levels, widest first: %s", ", ".join(levels))
    log.info("fabric profile %s: %s", profile.name, profile.summary)
    port = os.environ.get(metrics.ENV_PORT, "")
    if port.isdigit() and int(port):
        prometheus_client.start_http_server(int(port))
        log.info("metrics on :%s/metrics", port)
    kopf.run(clusterwide=namespace is None, namespaces=[namespace] if namespace else [], standalone=True, stop_flag=handlers.OperatorConfig.stop)
    if handlers.OperatorConfig.fatal:
        raise OperatorError(handlers.OperatorConfig.fatal)


def preflight(kubeconfig: str | None, wait_seconds: float = STARTUP_WAIT_SECONDS) -> client.ApiClient:
    """Connect and make one request, so that a bad kubeconfig or a dead server is one sentence before kopf starts.

    An API server that answers 429 ("storage is (re)initializing", right after
    it starts) or 5xx is waited for, one line per try, up to ``wait_seconds``.

    Returns:
        The connected client.

    Raises:
        OperatorError: no kubeconfig or in-cluster credentials, a kubeconfig
            that cannot be used, no answer, credentials refused (401/403), or
            still not ready after ``wait_seconds``.
    """
    if kubeconfig and not os.path.isfile(kubeconfig):
        raise OperatorError(f"no kubeconfig file at {kubeconfig}; pass --kubeconfig PATH or set KUBECONFIG to an existing file")
    env = os.environ.get("KUBECONFIG", "")
    if not kubeconfig and env and not any(os.path.isfile(p) for p in env.split(os.pathsep) if p):
        raise OperatorError(f"KUBECONFIG={env}: no kubeconfig file there; point it at one or pass --kubeconfig PATH")
    try:
        api = kube.connect(kubeconfig)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, yaml.YAMLError) as err:  # the client's loader does not check the file's shape
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise OperatorError(f"kubeconfig {where} cannot be used: {kube.describe(err)}") from None
    except config.ConfigException as err:
        if not kubeconfig and not os.environ.get("KUBECONFIG") and "host/port" in str(err):
            raise OperatorError(
                "no kubeconfig: KUBECONFIG is not set, ~/.kube/config does not exist and this is not a pod; "
                "pass --kubeconfig PATH or set KUBECONFIG (start a local cluster with 'railtrain dev up', which prints one)"
            ) from None
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise OperatorError(f"kubeconfig {where} cannot be used: {' '.join(str(err).split())}") from None
    host = api.configuration.host
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            client.CoreV1Api(api).list_namespace(limit=1, _request_timeout=10, _preload_content=False)
            return api
        except Exception as err:
            if kube.unreachable(err):
                raise OperatorError(
                    f"cannot reach the Kubernetes API server at {host}: {kube.describe(err)}; "
                    "start a cluster with 'railtrain dev up' or point --kubeconfig/KUBECONFIG at a running one"
                ) from None
            if not kube.transient(err):
                raise OperatorError(f"the Kubernetes API server at {host} refused the operator: {kube.describe(err)}") from None
            if time.monotonic() >= deadline:
                raise OperatorError(f"the Kubernetes API server at {host} is still not ready after {wait_seconds:.0f} s: {kube.describe(err)}") from None
            log.warning("the API server at %s is not ready yet (%s); retrying", host, kube.describe(err))
            time.sleep(1.0)


class QuietKopf(logging.Filter):
    """Keep kopf's routine lines out of the operator's log (a logging filter on the root handler).

    * ``Handler '...' succeeded.`` (one per event, INFO in kopf) → DEBUG;
    * a request kopf retries on its own (``Request attempt ... will retry``,
      ERROR in kopf, e.g. the 429 of an API server still starting) → WARNING.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf"):
            return True
        message = record.getMessage()
        if record.levelno == logging.INFO and message.endswith(" succeeded."):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        if record.levelno == logging.ERROR and "will retry" in message:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """One line per record (``time LEVEL logger: message``) at ``level``, through :class:`QuietKopf`."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its per-try "Retrying" lines; the operator logs one line per failed call
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, QuietKopf) for f in h.filters):
            h.addFilter(QuietKopf())
