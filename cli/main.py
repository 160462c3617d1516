"""The ``railtrain`` command line (typer + rich).

Commands stay thin: manifests are read by :mod:`railtrain.cli.manifest` (a
file, or standard input for ``-``) and validated by
:mod:`railtrain.crds.validation`, local runs live in :mod:`railtrain.cli.local`, cluster calls in
:mod:`railtrain.cli.k8s`, and the ``get`` views in :mod:`railtrain.cli.views`.
The cluster client, the local control plane and the operator are imported only
by the commands that need them.

Every error a person can fix ends the command with one sentence per problem on
stderr and a non-zero exit status, never a traceback: :class:`_Group` reports
usage errors, :class:`~railtrain.cli.errors.CliError`, manifest errors and
Kubernetes client errors in one place.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from railtrain.cli import errors, helptext
from railtrain.cli import manifest
from railtrain.cli.errors import CliError
from railtrain.crds.validation import ManifestError


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _stdout() -> Console:
    return Console(highlight=False)


def say(message: str, style: str = "dim") -> None:
    """Print one status sentence of ``railtrain`` itself to stderr (stdout stays for results and process output)."""
    _stderr().print(Text(message, style=style))


class _Group(TyperGroup):
    """The root command group: turns every user error into sentences on stderr and an exit status."""

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None, standalone_mode: bool = True, **extra: Any) -> Any:  # noqa: D102
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except typer.Abort:
            say("aborted", style="red")
            code = 1
        except Exception as err:  # reported below, or re-raised with its traceback
            code = _report(err)
        if standalone_mode:
            sys.exit(code)
        return code


def _report(err: Exception) -> int:
    """Print ``err`` for a person and return the exit status; re-raise programming errors."""
    if hasattr(err, "format_message") and hasattr(err, "exit_code") and not isinstance(err, CliError):
        # typer's (click's) usage errors: a bad flag, a missing argument.
        message = err.format_message().replace("Value error, ", "")  # typer's coercion adds pydantic's prefix
        if type(err).__name__ == "NoArgsIsHelpError":
            _stderr().print(Text(message))
        else:
            ctx = getattr(err, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _stderr().print(Text(f"error: {message}{hint}", style="red"))
        return int(err.exit_code)
    described = errors.describe(err)
    if described is None:
        raise err
    for message in described.messages:
        _stderr().print(Text(f"error: {message}", style="red"))
    return described.exit_code


helptext.plain_placeholders()
app = typer.Typer(
    cls=_Group,
    name="railtrain",
    context_settings={"help_option_names": helptext.HELP_OPTIONS},
    help="Kubernetes-native orchestrator for large-scale model training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dev_app = typer.Typer(help="A local cluster for trying railtrain: a real control plane with kwok GPU nodes, or a kind cluster in Docker (--kind).", no_args_is_help=True)
app.add_typer(dev_app, name="dev")
node_app = typer.Typer(help="Nodes the operator quarantined (taint railtrain.dev/quarantined): list them, clear one.", no_args_is_help=True)
app.add_typer(node_app, name="node")

KubeconfigOption = Annotated[
    Optional[str],
    typer.Option("--kubeconfig", envvar="KUBECONFIG", metavar="FILE", show_envvar=True, help="Kubeconfig file(s); default ~/.kube/config, then in-cluster credentials."),
]
NamespaceOption = Annotated[Optional[str], typer.Option("--namespace", "-n", metavar="NAMESPACE", help="Namespace; default: the manifest's, else the kubeconfig context's.")]
ContextNamespaceOption = Annotated[Optional[str], typer.Option("--namespace", "-n", metavar="NAMESPACE", help="Namespace; default: the kubeconfig context's.")]
ManifestArgument = Annotated[str, typer.Argument(metavar="FILE", help=manifest.HELP, show_default=False)]  # str: '-' vs './-' 


def _version(value: bool) -> None:
    if value:
        typer.echo(f"railtrain {metadata.version('railtrain')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Kubernetes-native orchestrator for large-scale model training."""


@app.command()
def validate(
    file: ManifestArgument,
    old: Annotated[Optional[str], typer.Option("--old", metavar="STORED", help="The stored object (e.g. 'kubectl get tj NAME -o yaml'): check FILE as an update of it, as the API server will (fields that define the gang change only while the job is suspended); '-' reads it from standard input.", show_default=False)] = None,
) -> None:
    """Check a TrainingJob manifest the way the API server will, without a cluster.

    Prints the gang shape when valid; otherwise prints one sentence per problem,
    naming the field, and exits with status 1. FILE or --old may be '-'
    (standard input), not both.
    """
    from railtrain.crds.validation import check_update

    if manifest.is_stdin(file) and manifest.is_stdin(old):
        raise CliError("FILE and --old cannot both be '-': standard input holds one manifest; give one of them as a file", exit_code=2)
    new = manifest.read(file)
    job = new.job() if old is None else check_update(manifest.read(old).data, new.data, new.source)
    spec = job.spec
    from railtrain.cli.views import count

    typer.echo(f"{new.source}: valid TrainingJob {job.metadata.name} ({count(spec.nodes, 'node')} × {count(spec.procs_per_node, 'process', 'processes')}, world size {spec.world_size})")


@app.command()
def run(
    file: ManifestArgument,
    local: Annotated[bool, typer.Option("--local", help="Run the gang as processes on this machine (required: cluster runs use 'railtrain submit').")] = False,
    steps: Annotated[Optional[int], typer.Option("--steps", metavar="N", help="Train until step N instead of the --steps in spec.args (the trainer's own flag, changed there); a run resumed from a checkpoint trains only the steps after it.", show_default=False)] = None,
    workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Working directory of the processes; a relative spec.checkpoint.location resolves against it too. Default: the current directory.", show_default=False)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every line of every rank (default: rank 0 fully, other ranks' errors and warnings).")] = False,
    grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds between SIGTERM and SIGKILL when stopping nodes.")] = 10.0,
    fault_bitflip: Annotated[Optional[str], typer.Option("--fault-bitflip", help="Inject: flip a bit, e.g. 'rank=1,step=20,mode=once|persistent,bit=0,index=0,target=param|activation' (docs/health.md).")] = None,
    fault_slow: Annotated[Optional[str], typer.Option("--fault-slow", help="Inject: slow a rank, e.g. 'rank=1,factor=1.2,from_step=10'.")] = None,
    fault_hang: Annotated[Optional[str], typer.Option("--fault-hang", help="Inject: hang a rank, e.g. 'rank=1,step=5,kind=compute|collective'.")] = None,
    fault_kill: Annotated[Optional[str], typer.Option("--fault-kill", help="Inject: SIGKILL a rank, e.g. 'rank=1,step=5'.")] = None,
    fault_bad_batch: Annotated[Optional[str], typer.Option("--fault-bad-batch", help="Inject: a batch whose loss is NaN on every try, e.g. 'step=5,rank=-1'.")] = None,
) -> None:
    """Run a TrainingJob's gang as local processes with the same environment its pods would get.

    Exits 0 when every node succeeds, 130 after Ctrl-C. When a node fails, the
    other nodes are stopped and spec.runPolicy decides, as on a cluster: the
    whole gang restarts (resuming from its checkpoints) or the run ends with
    the failing node's status (docs/operator.md, "Recovery"). The --fault-*
    flags inject faults (docs/health.md); a fault happens once: a restarted
    gang keeps only the faults it has not met yet. A failed run's summary line
    carries the gang's verdict and the rank that failed first.
    """
    from railtrain.cli import local as local_run
    from railtrain.cli import local_checks
    from railtrain.cli.views import count

    if not local:
        raise CliError("run needs --local: it runs the gang on this machine; to run on a cluster use 'railtrain submit FILE'", exit_code=2)
    if workdir is not None and not workdir.is_dir():
        raise CliError(f"--workdir: {workdir} is not a directory", exit_code=2)
    given = {"bitflip": fault_bitflip, "slow": fault_slow, "hang": fault_hang, "kill": fault_kill, "bad_batch": fault_bad_batch}
    parsed_faults = local_run.parse_fault_flags(given)
    job = manifest.read(file).job()
    if steps is not None:
        job = local_checks.with_steps(job, steps)
    spec = job.spec
    local_checks.check_faults(parsed_faults, local_run.FAULT_FLAGS, spec.world_size, local_checks.job_steps(job))
    faults = local_run.fault_environment(given)
    base_dir = (workdir or Path.cwd()).resolve()  # relative paths in the manifest resolve where the processes run
    ports = local_run.free_ports(spec.nodes + 1)
    nodes = local_run.plan_local(job, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=base_dir, extra_env=faults)
    say(f"{job.metadata.name}: {count(spec.nodes, 'node')} × {count(spec.procs_per_node, 'process', 'processes')} (world size {spec.world_size}), rendezvous {local_run.LOCAL_ADDR}:{ports[0]}")
    say(f"the image {spec.image} is ignored locally: '{' '.join(nodes[0].argv)}' runs with this machine's Python")
    if spec.checkpoint.location:
        say(f"checkpoints: {local_run.resolve_location(spec.checkpoint.location, base_dir)}")
    for warning in (local_checks.size_warning(spec.world_size, os.cpu_count()), local_checks.memory_warning(job, _memory_bytes())):
        if warning:
            say(warning, style="yellow")
    say(f"starting {count(spec.world_size, 'rank')} on {count(spec.nodes, 'local node')}; the first lines come after torch has started in every process")
    started = time.monotonic()
    from railtrain.cli.local_recovery import RecoveringRun

    def plan(restarts: int) -> list[Any]:
        if not restarts:
            return nodes
        fresh = local_run.free_ports(spec.nodes + 1)  # a new rendezvous, as a new gang of pods gets
        return local_run.plan_local(job, rdzv_port=fresh[0], metrics_ports=fresh[1:], base_dir=base_dir, restarts=restarts, extra_env=faults)

    from railtrain.cli.local_goodput import GoodputRecorder, summary

    notify = lambda s: say(s, style="yellow")  # noqa: E731
    recorder = GoodputRecorder()
    with tempfile.TemporaryDirectory(prefix="railtrain-local-") as messages:
        gang = lambda n: local_run.LocalGang(n, workdir=workdir, verbose=verbose, grace=grace, notify=notify, on_line=recorder.line)  # noqa: E731
        runner = RecoveringRun(job, plan, gang, Path(messages), notify, recorder=recorder)
        code = runner.run()
    elapsed = time.monotonic() - started
    say(f"{job.metadata.name}: {summary(recorder.goodput())}")
    if code == 0:
        say(f"{job.metadata.name}: all {spec.nodes} nodes succeeded in {elapsed:.1f}s", style="green")
    elif code == 130:
        say(f"{job.metadata.name}: stopped after {elapsed:.1f}s", style="yellow")
    else:
        last = runner.history[-1] if runner.history else None
        verdict = f"; verdict {last.verdict}: {last.detail}" if last else ""
        say(f"{job.metadata.name}: failed with exit status {code} after {elapsed:.1f}s{verdict}", style="red")
    raise typer.Exit(code)


def _memory_bytes() -> int | None:
    """This machine's physical memory in bytes (POSIX ``sysconf``), or ``None`` where unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@app.command()
def submit(
    file: ManifestArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    no_validate: Annotated[bool, typer.Option("--no-validate", hidden=True, help="Send the manifest unchecked (to see the API server's own validation).")] = False,
) -> None:
    """Validate a TrainingJob manifest locally, then create it in the cluster (FILE '-': from standard input)."""
    from railtrain.cli import k8s

    doc = manifest.read(file)  # read once: standard input cannot be read again
    if not no_validate:
        doc.job()  # every problem at once, before any network traffic
    elif not isinstance(doc.data, dict):
        raise ManifestError(["(root): a TrainingJob manifest must be a YAML mapping with apiVersion, kind, metadata and spec"], doc.source)
    body = doc.data
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name", "?")
    if namespace and meta.get("namespace") and namespace != meta["namespace"]:
        raise CliError(f"--namespace {namespace} differs from metadata.namespace {meta['namespace']} in {doc.source}; drop one of them", exit_code=2)
    cluster = k8s.connect(kubeconfig)
    target = namespace or meta.get("namespace") or cluster.namespace
    k8s.create_job(cluster, target, body)
    typer.echo(f"trainingjob.railtrain.dev/{name} created in namespace {target}")
    say(f"follow it with: railtrain get {name} -n {target}")


class OutputFormat(str, Enum):
    """Output formats of ``railtrain get``."""

    table = "table"
    yaml = "yaml"


@app.command()
def get(
    name: Annotated[Optional[str], typer.Argument(metavar="NAME", help="A job's name; omit to list jobs.", show_default=False)] = None,
    namespace: ContextNamespaceOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="List jobs in every namespace.")] = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table or yaml.")] = OutputFormat.table,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show TrainingJobs: a table of all of them, or one job's phase, conditions and placement."""
    from railtrain.cli import k8s, views

    if name and all_namespaces:
        raise CliError("--all-namespaces lists jobs; it cannot be combined with a NAME", exit_code=2)
    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    now = datetime.now(timezone.utc)
    out = _stdout()
    if name:
        obj = k8s.get_job(cluster, ns, name)
        if output is OutputFormat.yaml:
            typer.echo(views.to_yaml(obj), nl=False)
        else:
            out.print(views.job_detail(obj, now, k8s.rank_pod(cluster, ns, name)))
        return
    items = k8s.list_jobs(cluster, None if all_namespaces else ns)
    if output is OutputFormat.yaml:
        typer.echo(views.to_yaml(items), nl=False)
    elif not items:
        say("no trainingjobs in " + ("any namespace" if all_namespaces else f"namespace {ns}"))
    else:
        out.print(views.jobs_table(items, now, all_namespaces=all_namespaces))


@node_app.command("clear")
def node_clear(
    node: Annotated[str, typer.Argument(metavar="NODE", help="The node's name.", show_default=False)],
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Return a quarantined node to service: remove its railtrain.dev/quarantined taint (an administrator's decision)."""
    from railtrain.cli import k8s

    was = k8s.clear_quarantine(k8s.connect(kubeconfig), node)
    if was is None:
        say(f"node {node} is not quarantined; nothing to clear")
        return
    typer.echo(f"node/{node} cleared (was quarantined for a {was} verdict)")


@node_app.command("list")
def node_list(kubeconfig: KubeconfigOption = None) -> None:
    """List the quarantined nodes and the verdict that quarantined each."""
    from railtrain.cli import k8s

    nodes = k8s.quarantined_nodes(k8s.connect(kubeconfig))
    if not nodes:
        say("no node is quarantined")
    for name, verdict in nodes:
        typer.echo(f"{name}\t{verdict}")


@dev_app.command("up")
def dev_up(
    nodes: Annotated[Optional[int], typer.Option("--nodes", min=1, metavar="COUNT", help="GPU nodes: fake (kwok) nodes, or kind workers with --kind. Default 4, or 3 with --kind.")] = None,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, metavar="COUNT", help="nvidia.com/gpu capacity of each node (advertised, not real).")] = 8,
    name: Annotated[str, typer.Option("--name", metavar="NAME", help="Name of the local cluster.")] = "railtrain",
    kind: Annotated[bool, typer.Option("--kind", help="A real kind cluster in Docker (pods really run) instead of kwok nodes; the node image is built offline once.")] = False,
    load: Annotated[Optional[list[str]], typer.Option("--load", metavar="IMAGE", help="With --kind: a local Docker image to load into every worker (repeatable).")] = None,
    cuda_libs: Annotated[Optional[Path], typer.Option("--cuda-libs", metavar="DIR", help="With --kind: a folder holding nvidia/ (CUDA libraries) that every container on the workers sees read-only at /opt/railtrain/lib/python3.11/site-packages/nvidia; for the CPU trainer image (trainer/Dockerfile, TORCH_CUDA_LIBS=drop).")] = None,
) -> None:
    """Start (or reuse) a local cluster with GPU nodes and railtrain's CRDs; print its kubeconfig.

    The export line goes to stdout, so eval "$(railtrain dev up)" points kubectl and railtrain at it.
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
    """Stop a local cluster started by 'railtrain dev up' (with --kind: delete the kind cluster) and delete its state."""
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


@app.command(
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def operator(ctx: typer.Context) -> None:
    """Run the railtrain operator in the foreground (Ctrl-C or SIGTERM stops it; it stops by itself when the API server is gone)."""
    # The operator's flags are parsed once, by railtrain.operator.settings (also railtrain-operator's parser).
    try:
        from railtrain.operator import settings as operator_settings
    except ModuleNotFoundError as err:
        raise CliError(f"the operator cannot start: missing module {err.name} (install railtrain[operator])") from None
    try:
        settings = operator_settings.parse(ctx.args, prog="railtrain operator")
    except operator_settings.SettingsError as err:
        raise CliError(str(err)) from None
    except SystemExit as done:  # --help
        raise typer.Exit(done.code or 0) from None
    try:
        from railtrain.operator import main as operator_main
    except ModuleNotFoundError as err:
        raise CliError(f"the operator cannot start: missing module {err.name} (install railtrain[operator])") from None
    try:
        operator_main.run(settings)
    except operator_main.OperatorError as err:
        raise CliError(str(err)) from None


def main() -> None:
    """Entry point of the ``railtrain`` script: run the command line and exit with its status."""
    app()


if __name__ == "__main__":
    main()
