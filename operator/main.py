"""Run the railtrain operator in the foreground (``railtrain operator`` / ``railtrain-operator``)."""

from __future__ import annotations

import logging
import os

import kopf

from railtrain.operator import handlers


def run(namespace: str | None = None, kubeconfig: str | None = None, resync_seconds: float = 2.0) -> None:
    """Run the operator until interrupted (SIGINT/SIGTERM stop it cleanly).

    Args:
        namespace: watch only this namespace; None watches the whole cluster.
        kubeconfig: kubeconfig path; None uses $KUBECONFIG, ~/.kube/config or in-cluster config.
        resync_seconds: period of the level-triggered resync of unfinished jobs.
    """
    if kubeconfig:
        # kopf's default login handler and our client both read $KUBECONFIG.
        os.environ["KUBECONFIG"] = kubeconfig
    handlers.OperatorConfig.kubeconfig = kubeconfig
    handlers.OperatorConfig.resync_seconds = resync_seconds
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kopf.run(clusterwide=namespace is None, namespaces=[namespace] if namespace else [], standalone=True)
