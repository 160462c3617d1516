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
import threading
import time
from datetime import datetime, timezone
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text
from typer.core import TyperGroup

from railtrain.cli import errors, helptext
from railtrain.cli import manifest
from railtrain.cli.options import say
from railtrain.cli.options import stderr as _stderr
from railtrain.cli.options import stdout as _stdout
from railtrain.cli.errors import CliError
from railtrain.crds.process import leave_process
from railtrain.crds.validation import ManifestError


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
    """Print ``err`` for a person and return the exit status.

    An exception no rule describes (a programming error) is one sentence too, re-raised with its traceback only
    when ``RAILTRAIN_DEBUG`` is set (:data:`railtrain.cli.errors.DEBUG_ENV`).
    """
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
        if os.environ.get(errors.DEBUG_ENV):
            raise err
        described = errors.unexpected(err)
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
    add_completion=True,
    pretty_exceptions_enable=False,
)
from railtrain.cli.devcmds import dev_app  # noqa: E402

app.add_typer(dev_app, name="dev")
from railtrain.cli.datacmds import data_app  # noqa: E402

app.add_typer(data_app, name="data")
node_app = typer.Typer(help="Nodes the operator quarantined (taint railtrain.dev/quarantined): list them, clear one.", no_args_is_help=True)
app.add_typer(node_app, name="node")

from railtrain.cli.options import ContextNamespaceOption, KubeconfigOption, ManifestArgument, NamespaceOption, ObjectFormat, echo_object  # noqa: E402


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
    server: Annotated[bool, typer.Option("--server", help="Also ask the cluster's API server (a dry run, nothing is created): the job, and one of its pods as the operator renders it, whose pod-level rules (names, volumes, probes of spec.template) only the server checks.")] = False,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Check a TrainingJob manifest the way the API server will, without a cluster (with --server: with it).

    Prints the gang shape when valid; otherwise prints one sentence per problem,
    naming the field, and exits with status 1. FILE or --old may be '-'
    (standard input), not both. When the command is railtrain's trainer, its
    flags and parallel degrees are checked too, by the trainer's own parser.
    Offline, the pod-level rules of spec.template (the API server's own) are not
    checked: --server runs a server-side dry run of the job and of one rendered pod.

    Example: railtrain validate examples/tiny/trainingjob.yaml --server
    """
    from railtrain.crds.validation import check_update

    if manifest.is_stdin(file) and manifest.is_stdin(old):
        raise CliError("FILE and --old cannot both be '-': standard input holds one manifest; give one of them as a file", exit_code=2)
    new = manifest.read(file)
    job = new.checked_job() if old is None else manifest.checked(check_update(manifest.read(old).data, new.data, new.source), new.source)
    spec = job.spec
    from railtrain.cli.views import count

    if server:
        _validate_on_server(new, job, namespace, kubeconfig)
    spares = f", {count(spec.spares, 'hot spare')}" if spec.spares else ""
    typer.echo(f"{new.source}: valid TrainingJob {job.metadata.name} ({count(spec.nodes, 'node')} × {count(spec.procs_per_node, 'process', 'processes')}, world size {spec.world_size}{spares})")
    if not server:
        say("pod-level rules (names, volumes, probes of spec.template) are the API server's, checked when the pods are created; 'railtrain validate --server' asks it now")


def _validate_on_server(doc: manifest.Manifest, job: Any, namespace: str | None, kubeconfig: str | None) -> None:
    """``validate --server``: a server-side dry run of the job, then of its rank-0 pod as the operator renders it.

    Raises:
        CliError: the server would refuse the job or the pod (its sentences, each naming the field), or cannot be reached.
    """
    from railtrain.cli import k8s
    from railtrain.operator.job.render import render_pod

    meta = doc.data.get("metadata") or {}
    if namespace and meta.get("namespace") and namespace != meta["namespace"]:
        raise CliError(f"--namespace {namespace} differs from metadata.namespace {meta['namespace']} in {doc.source}; drop one of them", exit_code=2)
    cluster = k8s.connect(kubeconfig)
    target = namespace or meta.get("namespace") or cluster.namespace
    stored = k8s.create_job(cluster, target, doc.data, dry_run=True)
    uid = (stored.get("metadata") or {}).get("uid") or "00000000-0000-0000-0000-000000000000"
    refused = k8s.dry_run_pod(cluster, target, render_pod(job, target, uid, 0), job.metadata.name)
    if refused:
        raise CliError(*(f"{doc.source}: {sentence}" for sentence in refused))


@app.command()
def run(
    file: ManifestArgument,
    local: Annotated[bool, typer.Option("--local", help="Run the gang as processes on this machine (required: cluster runs use 'railtrain submit').")] = False,
    steps: Annotated[Optional[int], typer.Option("--steps", metavar="N", help="Train until step N instead of the --steps in spec.args (the trainer's own flag, changed there); a run resumed from a checkpoint trains only the steps after it.", show_default=False)] = None,
    workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Working directory of the processes; a relative spec.checkpoint.location resolves against it too. Default: the current directory.", show_default=False)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every line of every rank (default: rank 0 fully, other ranks' errors and warnings).")] = False,
    grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds between SIGTERM and SIGKILL when stopping nodes.")] = 10.0,
    fault_bitflip: Annotated[Optional[str], typer.Option("--fault-bitflip", help="Inject: flip a bit, e.g. 'rank=1,step=20,bit=0' (more keys: mode=once|persistent, index=0, target=param|activation; docs/health.md).")] = None,
    fault_slow: Annotated[Optional[str], typer.Option("--fault-slow", help="Inject: slow a rank, e.g. 'rank=1,factor=1.2,from_step=10'.")] = None,
    fault_hang: Annotated[Optional[str], typer.Option("--fault-hang", help="Inject: hang a rank, e.g. 'rank=1,step=5' (more keys: kind=compute|collective|init; init: never joins the process group, step 0).")] = None,
    fault_kill: Annotated[Optional[str], typer.Option("--fault-kill", help="Inject: SIGKILL a rank, e.g. 'rank=1,step=5'.")] = None,
    fault_bad_batch: Annotated[Optional[str], typer.Option("--fault-bad-batch", help="Inject: a batch whose loss is NaN on every try, e.g. 'step=5,rank=-1'.")] = None,
    spares: Annotated[Optional[int], typer.Option("--spares", min=0, max=64, metavar="N", help="Start N hot spare nodes (spec.spares; needs spec.runPolicy.restartInPlace): a lost node's rank goes to a spare and the other nodes restart in place (docs/operator.md, Hot spares).", show_default=False)] = None,
    fault_lose_node: Annotated[Optional[str], typer.Option("--fault-lose-node", help="Inject: SIGKILL every process of a node (supervisor and workers) once node rank 0 logged the step, every node printed a line and every hot spare waits beside the gang, e.g. 'node=1,step=20', as when its machine is lost.")] = None,
    fault_kill_group: Annotated[Optional[str], typer.Option("--fault-kill-group", help="Inject (spec.faultTolerance): SIGKILL every process of a replica group once it logged the step, e.g. 'group=1,step=5'; it is replaced alone (docs/fault-tolerance.md).")] = None,
) -> None:
    """Run a TrainingJob's gang as local processes with the same environment its pods would get.

    Exits 0 when every node succeeds, 130 after Ctrl-C. When a node fails, the
    other nodes are stopped and spec.runPolicy decides, as on a cluster: the
    whole gang restarts (resuming from its checkpoints) or the run ends with
    the failing node's status (docs/operator.md, "Recovery"). With
    runPolicy.restartInPlace the processes restart inside the same nodes
    instead where no node must go, and with --spares (spec.spares) a lost
    node's rank goes to a hot spare node. The --fault-*
    flags inject faults (docs/health.md); a fault happens once: a restarted
    gang keeps only the faults it has not met yet. A failed run's summary line
    carries the gang's verdict and the rank that failed first.

    Example: railtrain run examples/tiny/trainingjob.yaml --local --steps 50
    """
    from railtrain.cli import local as local_run
    from railtrain.cli import runlocal

    if not local:
        raise CliError("run needs --local: it runs the gang on this machine; to run on a cluster use 'railtrain submit FILE'", exit_code=2)
    if workdir is not None and not workdir.is_dir():
        raise CliError(f"--workdir: {workdir} is not a directory", exit_code=2)
    given = {"bitflip": fault_bitflip, "slow": fault_slow, "hang": fault_hang, "kill": fault_kill, "bad_batch": fault_bad_batch}
    job, faults = runlocal.checked_job(file, steps, given, spares)
    spec = job.spec
    base_dir = (workdir or Path.cwd()).resolve()  # relative paths in the manifest resolve where the processes run
    if spec.fault_tolerance is not None:  # replica groups: R gangs and a Lighthouse (railtrain.cli.local_replica)
        raise typer.Exit(runlocal.run_replica_groups(job, faults, fault_kill_group, base_dir, workdir, verbose, grace))
    if fault_kill_group:
        raise CliError("--fault-kill-group needs replica groups (spec.faultTolerance); use --fault-kill to kill one rank", exit_code=2)
    lose = runlocal.lose_node_watcher(fault_lose_node, job, lambda: runner.current, lambda s: say(s, style="yellow"))  # checked before anything starts
    ports = local_run.free_ports(spec.nodes + spec.spares + 1)
    uid = local_run.new_local_uid()  # one run: its restarts share the node-local tiers, a new invocation does not
    nodes = local_run.plan_local(job, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=base_dir, extra_env=faults, uid=uid)
    logs = local_run.local_log_dir(job.metadata.name, uid)
    runlocal.announce(job, nodes[0].argv, ports[0], base_dir, logs)
    started = time.monotonic()
    from railtrain.cli.local_recovery import RecoveringRun

    plan = runlocal.gang_plan(job, nodes, base_dir, faults, uid)
    from railtrain.cli.local_goodput import GoodputRecorder, summary

    notify = lambda s: say(s, style="yellow")  # noqa: E731
    recorder = GoodputRecorder()
    with tempfile.TemporaryDirectory(prefix="railtrain-local-") as messages:
        def on_line(rank: int, line: str) -> None:
            recorder.line(rank, line)
            lose(rank, line)

        gang = lambda n: local_run.LocalGang(n, workdir=workdir, verbose=verbose, grace=grace, notify=notify, on_line=on_line, log_dir=logs, hold=spec.spares > 0)  # noqa: E731
        refill = runlocal.spare_plan(job, base_dir, faults, uid) if spec.spares else None  # a spare that took a rank is replaced, as the operator does
        runner = RecoveringRun(job, plan, gang, Path(messages), notify, recorder=recorder, spare=refill)
        code = runner.run()
    elapsed = time.monotonic() - started
    runlocal.finish_tiers(job, uid, succeeded=code == 0)
    say(f"{job.metadata.name}: {summary(recorder.goodput())}")
    runlocal.say_outcome(job, code, elapsed, runner.history)
    raise typer.Exit(code)


@app.command()
def submit(
    file: ManifestArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    wait: Annotated[bool, typer.Option("--wait", "-w", help="Follow the job until it ends: phase, conditions as they change, restarts and progress; exit 0 if it Succeeded, 1 if it Failed (Ctrl-C stops following, not the job).")] = False,
    no_validate: Annotated[bool, typer.Option("--no-validate", hidden=True, help="Send the manifest unchecked (to see the API server's own validation).")] = False,
) -> None:
    """Validate a TrainingJob manifest locally (railtrain's trainer's flags too), then create it in the cluster (FILE '-': from standard input).

    Example: railtrain submit examples/tiny/trainingjob.yaml --wait
    """
    from railtrain.cli import k8s

    doc = manifest.read(file)  # read once: standard input cannot be read again
    if not no_validate:
        doc.checked_job()  # every problem at once (the trainer's flags too), before any network traffic
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
    if wait:
        from railtrain.cli.jobcmds import follow

        raise typer.Exit(follow(cluster, target, name))
    say(f"follow it with: railtrain submit --wait next time, or: railtrain describe {name} -n {target}; railtrain logs {name} -n {target} -f")


class OutputFormat(str, Enum):
    """Output formats of ``railtrain get``."""

    table = "table"
    json = "json"
    yaml = "yaml"


@app.command()
def get(
    name: Annotated[Optional[str], typer.Argument(metavar="NAME", help="A job's name; omit to list jobs.", show_default=False)] = None,
    namespace: ContextNamespaceOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="List jobs in every namespace.")] = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.table,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show TrainingJobs: a table of all of them, or one job's phase, conditions and placement.

    Example: railtrain get -A
    """
    from railtrain.cli import k8s, views

    if name and all_namespaces:
        raise CliError("--all-namespaces lists jobs; it cannot be combined with a NAME", exit_code=2)
    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    now = datetime.now(timezone.utc)
    out = _stdout()
    if name:
        obj = k8s.get_job(cluster, ns, name)
        if output is OutputFormat.json:
            echo_object(obj, ObjectFormat.json)
        elif output is OutputFormat.yaml:
            typer.echo(views.to_yaml(obj), nl=False)
        else:
            out.print(views.job_detail(obj, now, k8s.rank_pod(cluster, ns, name)))
        return
    items = k8s.list_jobs(cluster, None if all_namespaces else ns)
    if output is OutputFormat.json:
        echo_object({"apiVersion": "v1", "kind": "List", "items": items}, ObjectFormat.json)
    elif output is OutputFormat.yaml:
        typer.echo(views.to_yaml(items), nl=False)
    elif not items:
        say("no trainingjobs in " + ("any namespace" if all_namespaces else f"namespace {ns}"))
    else:
        views.print_table(out, views.jobs_table(items, now, all_namespaces=all_namespaces))


from railtrain.cli import jobcmds  # noqa: E402

for _command in (jobcmds.describe, jobcmds.logs, jobcmds.delete, jobcmds.suspend, jobcmds.resume, jobcmds.plan, jobcmds.snapshot):
    app.command()(_command)


@node_app.command("clear")
def node_clear(
    node: Annotated[str, typer.Argument(metavar="NODE", help="The node's name.", show_default=False)],
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Return a quarantined node to service: remove its railtrain.dev/quarantined taint (an administrator's decision).

    Example: railtrain node clear gpu-node-7
    """
    from railtrain.cli import k8s

    was = k8s.clear_quarantine(k8s.connect(kubeconfig), node)
    if was is None:
        say(f"node {node} is not quarantined; nothing to clear")
        return
    typer.echo(f"node/{node} cleared (was quarantined " + ("by the railtrain.dev/quarantined label)" if was == "label" else f"for a {was} verdict)"))


@node_app.command("list")
def node_list(kubeconfig: KubeconfigOption = None) -> None:
    """List the quarantined nodes and the verdict that quarantined each.

    Example: railtrain node list
    """
    from railtrain.cli import k8s

    nodes = k8s.quarantined_nodes(k8s.connect(kubeconfig))
    if not nodes:
        say("no node is quarantined")
    for name, verdict in nodes:
        typer.echo(f"{name}\t{verdict}")


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
    before = set(threading.enumerate())  # threads this process had already (in-process callers, e.g. tests): not the run's
    try:
        operator_main.run(settings)
        code = 0
    except operator_main.OperatorError as err:
        code = _report(CliError(str(err)))
    if operator_main.threads_left(before):
        # Its watch threads may still be blocked in calls to an API server that stopped answering: leave without
        # interpreter finalization, as the railtrain-operator script does (railtrain.crds.process.leave_process).
        leave_process(code)
    if code:
        raise typer.Exit(code)


def main() -> None:
    """Entry point of the ``railtrain`` script: run the command line and exit with its status."""
    app()


if __name__ == "__main__":
    main()
