"""The job commands of ``railtrain``: describe, logs, delete, suspend, resume, plan, snapshot, and ``submit --wait``.

Each command is a plain function registered on the app by
:mod:`railtrain.cli.main`; cluster calls are in :mod:`railtrain.cli.k8s` and
:mod:`railtrain.cli.k8s_jobs`, views in :mod:`railtrain.cli.describe`,
:mod:`railtrain.cli.logs` and :mod:`railtrain.cli.plan`. Errors are raised as
:class:`~railtrain.cli.errors.CliError` sentences, reported by the app.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from railtrain.cli import manifest
from railtrain.cli.errors import CliError
from railtrain.cli.options import (
    ContextNamespaceOption,
    JobArgument,
    KubeconfigOption,
    ManifestArgument,
    NamespaceOption,
    ObjectFormat,
    OutputOption,
    echo_object,
    say,
    stdout,
)


def follow(cluster: object, namespace: str, name: str) -> int:
    """Follow a submitted job until it ends (:func:`railtrain.cli.watch.follow_job`); returns the exit status."""
    from railtrain.cli import k8s_jobs
    from railtrain.cli.watch import follow_job

    return follow_job(lambda: k8s_jobs.watch_job(cluster, namespace, name), stdout(), name)  # type: ignore[arg-type]


def describe(job: JobArgument, namespace: ContextNamespaceOption = None, output: OutputOption = ObjectFormat.table, kubeconfig: KubeconfigOption = None) -> None:
    """Show everything about one job: spec summary, conditions, placement per rank with its domains, restarts by reason, progress, goodput, its Kueue Workload (queue, admission, eviction), failed ranks' verdicts and recent Events.

    -o json|yaml prints the job, its pods and its Events as one object.

    Example: railtrain describe tiny -n research
    """
    from railtrain.cli import k8s, k8s_jobs
    from railtrain.cli.describe import describe_view
    from railtrain.cli.kueueview import kueue_table

    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    obj = k8s.get_job(cluster, ns, job)
    pods = k8s_jobs.job_pods(cluster, ns, job)
    events = k8s_jobs.job_events(cluster, ns, job)
    kueue = k8s_jobs.kueue_objects(cluster, obj)  # None: not a Kueue job
    if output is not ObjectFormat.table:
        echo_object({"job": obj, "pods": pods, "events": events, **({"workload": kueue[0], "localQueue": kueue[1]} if kueue else {})}, output)
        return
    stdout().print(describe_view(obj, pods, events, datetime.now(timezone.utc), kueue_table(obj, *kueue) if kueue else None))


def logs(
    job: JobArgument,
    rank: Annotated[Optional[int], typer.Option("--rank", "-r", min=0, metavar="N", help="The pod of node rank N (its log holds every local process). Default: rank 0.", show_default=False)] = None,
    all_ranks: Annotated[bool, typer.Option("--all", "-a", help="Every rank, interleaved in time order, each line prefixed \\[rank N].")] = False,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends, across restarts (a marker line starts each new attempt); exit 0 if it Succeeded, 1 if it Failed (Ctrl-C stops).")] = False,
    previous: Annotated[bool, typer.Option("--previous", "-p", help="The previous gang's pods (before the latest restart), where they are kept.")] = False,
    namespace: ContextNamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Print a job's training logs: one rank's, or every rank's interleaved with a \\[rank N] prefix.

    With -f it follows the job, not one gang: after a restart it prints a marker line and goes on with the new
    pods, and it exits with the job's outcome (0 Succeeded, 1 Failed or deleted, 130 Ctrl-C).

    Example: railtrain logs tiny --all -f
    """
    from railtrain.cli import k8s, k8s_jobs
    from railtrain.cli import logs as joblogs

    if rank is not None and all_ranks:
        raise CliError("--rank and --all exclude each other: give one rank, or --all for every rank", exit_code=2)
    if follow_ and previous:
        raise CliError("--follow and --previous exclude each other: a previous gang's pods have ended; follow the job, or read the previous gang", exit_code=2)
    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    obj = k8s.get_job(cluster, ns, job)
    out = sys.stdout
    if follow_:
        from railtrain.crds.podtemplate import TRAINER

        joblogs.check_rank(obj, None if all_ranks else (rank or 0))
        try:
            code = joblogs.follow_job(
                job,
                lambda: k8s_jobs.watch_job(cluster, ns, job),
                lambda: k8s_jobs.job_pods(cluster, ns, job),
                lambda pod: k8s_jobs.stream_log(cluster, ns, pod["metadata"]["name"]),
                lambda line: (out.write(line + "\n"), out.flush()),
                lambda sentence: (out.flush(), say(sentence)),
                None if all_ranks else (rank or 0),
                TRAINER,
            )
        except KeyboardInterrupt:
            say(f"stopped following; trainingjob {job} is left as it is")
            raise typer.Exit(130) from None
        raise typer.Exit(code)
    pods = joblogs.pick_pods(obj, k8s_jobs.job_pods(cluster, ns, job), None if all_ranks else (rank or 0), previous)
    names = {joblogs.pod_rank(p): p["metadata"]["name"] for p in pods}
    texts = {r: k8s_jobs.read_log(cluster, ns, pod).splitlines() for r, pod in names.items()}
    for line in joblogs.merge(texts):
        out.write((joblogs.prefixed(line.rank, line.text) if all_ranks else line.text) + "\n")


def delete(job: JobArgument, namespace: ContextNamespaceOption = None, kubeconfig: KubeconfigOption = None) -> None:
    """Delete a job; its pods and Service are deleted with it.

    Example: railtrain delete tiny
    """
    from railtrain.cli import k8s, k8s_jobs

    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    k8s_jobs.delete_job(cluster, ns, job)
    typer.echo(f"trainingjob.railtrain.dev/{job} deleted from namespace {ns}")


def _suspend(job: str, namespace: str | None, kubeconfig: str | None, suspend: bool) -> None:
    from railtrain.cli import k8s, k8s_jobs

    cluster = k8s.connect(kubeconfig)
    ns = namespace or cluster.namespace
    changed = k8s_jobs.set_suspend(cluster, ns, job, suspend)
    word = "suspended" if suspend else "resumed"
    if not changed:
        say(f"trainingjob {job} is {'already suspended' if suspend else 'not suspended'}; nothing to do")
        return
    typer.echo(f"trainingjob.railtrain.dev/{job} {word}")
    say("its pods are deleted; checkpoints are kept for the resume" if suspend else "the operator queues its gang again; it resumes from its newest checkpoint")


def suspend(job: JobArgument, namespace: ContextNamespaceOption = None, kubeconfig: KubeconfigOption = None) -> None:
    """Suspend a job (spec.runPolicy.suspend: true): its gang is deleted and its GPUs freed; resume continues from its checkpoints.

    Example: railtrain suspend tiny
    """
    _suspend(job, namespace, kubeconfig, True)


def resume(job: JobArgument, namespace: ContextNamespaceOption = None, kubeconfig: KubeconfigOption = None) -> None:
    """Resume a suspended job: it takes its turn in the admission queue again.

    Example: railtrain resume tiny
    """
    _suspend(job, namespace, kubeconfig, False)


TopologyPresetOption = Annotated[Optional[str], typer.Option("--topology-preset", metavar="PRESET", help="The operator's topology preset: railtrain, gke, aws, oci or nvidia (docs/topology.md).")]
TopologyLevelsOption = Annotated[Optional[str], typer.Option("--topology-levels", metavar="KEYS", help="The operator's topology levels: node label keys, widest first, comma-separated.")]


def plan(
    file: ManifestArgument,
    snapshot: Annotated[Optional[Path], typer.Option("--snapshot", metavar="FILE", help="Plan against a file written by 'railtrain snapshot' instead of the live cluster (offline).", show_default=False)] = None,
    namespace: NamespaceOption = None,
    topology_preset: TopologyPresetOption = None,
    topology_levels: TopologyLevelsOption = None,
    output: OutputOption = ObjectFormat.table,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Say where a job would be placed now, or why not, using the operator's own admission and placement code (read-only).

    Lists every node with the filter it fails for this job, and the jobs ahead of it in the queue.

    Example: railtrain plan examples/gpu/trainingjob.yaml
    """
    import yaml

    from railtrain.cli import plan as planner
    from railtrain.operator.scheduling import topology

    doc = manifest.read(file)
    doc.checked_job()
    try:
        levels = topology.resolve_levels(topology_preset, topology_levels, os.environ)
    except ValueError as err:
        raise CliError(str(err), exit_code=2) from None
    meta = doc.data.get("metadata") or {}
    if snapshot is not None:
        try:
            objects = planner.read_snapshot(yaml.safe_load(snapshot.read_text()), str(snapshot))
        except OSError as err:
            raise CliError(f"--snapshot {snapshot}: {err.strerror or err}", exit_code=2) from None
        except yaml.YAMLError as err:
            from railtrain.crds.validation import yaml_cause

            raise CliError(f"--snapshot {snapshot}: not YAML or JSON{yaml_cause(err)}; write one with 'railtrain snapshot > FILE'", exit_code=2) from None
        except ValueError as err:
            raise CliError(str(err), exit_code=2) from None
        ns = namespace or meta.get("namespace") or "default"
    else:
        from railtrain.cli import k8s, k8s_jobs

        cluster = k8s.connect(kubeconfig)
        objects = k8s_jobs.cluster_objects(cluster)
        ns = namespace or meta.get("namespace") or cluster.namespace
    result = planner.plan(doc.data, ns, objects, levels, datetime.now(timezone.utc))
    if output is not ObjectFormat.table:
        echo_object(planner.as_data(result), output)
        return
    stdout().print(planner.plan_view(result))


def snapshot(kubeconfig: KubeconfigOption = None) -> None:
    """Print the cluster's nodes, pods and TrainingJobs as one YAML document, for 'railtrain plan --snapshot' offline.

    Example: railtrain snapshot > cluster.yaml
    """
    import yaml

    from railtrain.cli import k8s, k8s_jobs
    from railtrain.cli.plan import make_snapshot

    objects = k8s_jobs.cluster_objects(k8s.connect(kubeconfig))
    typer.echo(yaml.safe_dump(make_snapshot(objects, datetime.now(timezone.utc)), sort_keys=False), nl=False)
    say(f"{len(objects['nodes'])} nodes, {len(objects['pods'])} pods, {len(objects['trainingjobs'])} trainingjobs")
