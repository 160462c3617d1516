"""``railtrain dev up`` / ``dev down``: a local cluster for trying railtrain (a real control plane with KWOK GPU nodes, or kind).

The control plane is imported only here, and only when a command runs
(:func:`_import_controlplane`), so an installation without it still runs every
other command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from railtrain.cli.errors import CliError
from railtrain.cli.options import say

dev_app = typer.Typer(help="A local cluster for trying railtrain: a real control plane with kwok GPU nodes, or a kind cluster in Docker (--kind).", no_args_is_help=True)


@dev_app.command("up")
def dev_up(
    nodes: Annotated[Optional[int], typer.Option("--nodes", min=1, metavar="COUNT", help="GPU nodes: fake (kwok) nodes, or kind workers with --kind. Default 4, or 3 with --kind.")] = None,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, metavar="COUNT", help="nvidia.com/gpu capacity of each node (advertised, not real).")] = 8,
    name: Annotated[str, typer.Option("--name", metavar="NAME", help="Name of the local cluster.")] = "railtrain",
    kind: Annotated[bool, typer.Option("--kind", help="A real kind cluster in Docker (pods really run) instead of kwok nodes; the node image is built offline once.")] = False,
    load: Annotated[Optional[list[str]], typer.Option("--load", metavar="IMAGE", help="With --kind: a local Docker image to load into every worker (repeatable).")] = None,
    cuda_libs: Annotated[Optional[Path], typer.Option("--cuda-libs", metavar="DIR", help="With --kind: a folder holding nvidia/ (CUDA libraries) that every container on the workers sees read-only as the trainer image's site-packages/nvidia (under /opt/railtrain); for the CPU trainer image (trainer/Dockerfile, TORCH_CUDA_LIBS=drop).")] = None,
) -> None:
    """Start (or reuse) a local cluster with GPU nodes and railtrain's CRDs; print its kubeconfig.

    The export line goes to stdout, so eval "$(railtrain dev up)" points kubectl and railtrain at it.

    Example: eval "$(railtrain dev up --nodes 4 --gpus-per-node 8)"
    """
    controlplane = _import_controlplane()
    if (load or cuda_libs) and not kind:
        raise CliError("--load and --cuda-libs need --kind: kwok nodes run no containers")
    if cuda_libs is not None and not (cuda_libs / "nvidia").is_dir():
        raise CliError(f"--cuda-libs: {cuda_libs} has no nvidia/ folder")
    if kind:
        from railtrain.cli.controlplane import kind as kind_cluster

        workers = nodes or 3
        say(f"starting kind cluster {name} (1 control plane + {workers} workers × {gpus_per_node} GPUs); the first start builds the node image and takes minutes")
        try:
            kubeconfig = kind_cluster.kind_up(workers, gpus_per_node, name, images=load or (), cuda_libs=cuda_libs.resolve() if cuda_libs else None)
        except (kind_cluster.KindError, controlplane.BinariesError) as err:
            raise CliError(f"kind cluster {name} did not start: {err}") from None
        say(f"kind cluster {name} is up: {workers} workers × {gpus_per_node} GPUs; kubeconfig {kubeconfig}", style="green")
        typer.echo(f"export KUBECONFIG={kubeconfig}")
        return
    from railtrain.cli.controlplane import dev

    nodes = nodes or 4
    say(f"starting local cluster {name} ({nodes} nodes × {gpus_per_node} GPUs); the first start builds the binaries and takes minutes")
    try:
        kubeconfig = dev.dev_up(nodes, gpus_per_node, name)
    except (controlplane.ClusterError, controlplane.BinariesError) as err:
        raise CliError(f"local cluster {name} did not start: {err}") from None
    say(f"local cluster {name} is up: {nodes} nodes × {gpus_per_node} GPUs; kubeconfig {kubeconfig}", style="green")
    typer.echo(f"export KUBECONFIG={kubeconfig}")


@dev_app.command("down")
def dev_down(
    name: Annotated[str, typer.Option("--name", metavar="NAME", help="Name of the local cluster.")] = "railtrain",
    kind: Annotated[bool, typer.Option("--kind", help="Delete the kind cluster of that name instead.")] = False,
) -> None:
    """Stop a local cluster started by 'railtrain dev up' (with --kind: delete the kind cluster) and delete its state.

    Example: railtrain dev down
    """
    _import_controlplane()
    if kind:
        from railtrain.cli.controlplane import kind as kind_cluster

        try:
            existed = kind_cluster.kind_down(name)
        except kind_cluster.KindError as err:
            raise CliError(f"kind cluster {name} could not be deleted: {err}") from None
        say(f"kind cluster {name} is deleted" if existed else f"there was no kind cluster named {name}", style="green" if existed else "dim")
        return
    from railtrain.cli.controlplane import dev

    if dev.dev_down(name):
        say(f"local cluster {name} is down", style="green")
    else:
        say(f"there was no local cluster named {name}")


def _import_controlplane() -> Any:
    try:
        import railtrain.cli.controlplane as controlplane
    except ModuleNotFoundError as err:
        raise CliError(f"the local control plane is not available in this installation (missing module {err.name})") from None
    return controlplane
