"""Run the railtrain operator in the foreground (``railtrain operator`` / ``railtrain-operator``)."""

from __future__ import annotations

import logging
import os

import kopf
import prometheus_client

from railtrain.operator import handlers, metrics, topology


def run(
    namespace: str | None = None,
    kubeconfig: str | None = None,
    resync_seconds: float = 2.0,
    topology_preset: str | None = None,
    topology_levels: str | None = None,
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

    Raises:
        ValueError: an unknown preset or a malformed level list (before anything starts).
    """
    levels = topology.resolve_levels(topology_preset, topology_levels, os.environ)
    if kubeconfig:
        # kopf's default login handler and our client both read $KUBECONFIG.
        os.environ["KUBECONFIG"] = kubeconfig
    handlers.OperatorConfig.kubeconfig = kubeconfig
    handlers.OperatorConfig.namespace = namespace
    handlers.OperatorConfig.resync_seconds = resync_seconds
    handlers.OperatorConfig.topology_levels = levels
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("railtrain.operator").info("topology levels, widest first: %s", ", ".join(levels))
    port = os.environ.get(metrics.ENV_PORT, "")
    if port.isdigit() and int(port):
        prometheus_client.start_http_server(int(port))
        logging.getLogger("railtrain.operator").info("metrics on :%s/metrics", port)
    kopf.run(clusterwide=namespace is None, namespaces=[namespace] if namespace else [], standalone=True)
