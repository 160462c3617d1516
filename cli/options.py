"""Options and output helpers shared by the ``railtrain`` commands (:mod:`railtrain.cli.main`, :mod:`railtrain.cli.jobcmds`).

Shell completion of job names (:func:`complete_job_names`) lives here too: typer
calls it while the shell completes a NAME argument, so it must be quick and
quiet, returning nothing on any error (no cluster, no CRD, a bad kubeconfig).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text

from railtrain.cli import manifest


def stderr() -> Console:
    """A console on stderr for railtrain's own sentences."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def stdout() -> Console:
    """A console on stdout for results."""
    return Console(highlight=False)


def say(message: str, style: str = "dim") -> None:
    """Print one status sentence of ``railtrain`` itself to stderr (stdout stays for results and process output)."""
    stderr().print(Text(message, style=style))


def complete_job_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a job's NAME: the TrainingJobs of the namespace (``-n``, else the kubeconfig's), starting with ``incomplete``.

    Returns:
        Matching names; ``[]`` on any failure (completion must never print an error).
    """
    try:
        from railtrain.cli import k8s, k8s_jobs

        params = ctx.params if ctx is not None else {}
        cluster = k8s.connect(params.get("kubeconfig") or os.environ.get("KUBECONFIG"))
        names = k8s_jobs.job_names(cluster, params.get("namespace") or cluster.namespace)
        return [n for n in names if n.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001  (quiet by design)
        return []


class ObjectFormat(str, Enum):
    """``-o`` of the commands that print objects."""

    table = "table"
    json = "json"
    yaml = "yaml"


KubeconfigOption = Annotated[
    Optional[str],
    typer.Option("--kubeconfig", envvar="KUBECONFIG", metavar="FILE", show_envvar=True, help="Kubeconfig file(s); default ~/.kube/config, then in-cluster credentials."),
]
NamespaceOption = Annotated[Optional[str], typer.Option("--namespace", "-n", metavar="NAMESPACE", help="Namespace; default: the manifest's, else the kubeconfig context's.")]
ContextNamespaceOption = Annotated[Optional[str], typer.Option("--namespace", "-n", metavar="NAMESPACE", help="Namespace; default: the kubeconfig context's.")]
ManifestArgument = Annotated[str, typer.Argument(metavar="FILE", help=manifest.HELP, show_default=False)]  # str: '-' vs './-'
JobArgument = Annotated[str, typer.Argument(metavar="JOB", help="The TrainingJob's name.", show_default=False, autocompletion=complete_job_names)]
OutputOption = Annotated[ObjectFormat, typer.Option("--output", "-o", help="table (for people), json or yaml (the objects).")]


def clean(obj: Any) -> Any:
    """``obj`` (an API object, or a mapping/list holding some) without ``metadata.managedFields``."""
    if isinstance(obj, list):
        return [clean(o) for o in obj]
    if isinstance(obj, dict):
        out = {k: clean(v) for k, v in obj.items() if k != "managedFields"}
        return out
    return obj


def echo_object(obj: Any, fmt: ObjectFormat) -> None:
    """Print an object as ``-o json`` or ``-o yaml`` asks (after :func:`clean`)."""
    import json

    import yaml

    obj = clean(obj)
    typer.echo(yaml.safe_dump(obj, sort_keys=False) if fmt is ObjectFormat.yaml else json.dumps(obj, indent=2, default=str), nl=fmt is not ObjectFormat.yaml)
