"""Draw the chart's Grafana dashboard (helm/railtrain/files/dashboard.json) from real data, without Grafana.

Grafana is not packaged for Debian or PyPI, so this script stands in for it:

1. starts the local control plane with KWOK GPU nodes and the real operator
   with its metrics endpoint on (``RAILTRAIN_OPERATOR_METRICS_PORT``);
2. submits examples/tiny as research/tiny onto two KWOK nodes whose pod IPs are
   on the loopback network, and once its pods are Running starts a real trainer
   gang of examples/tiny (2 nodes × 1 process, gloo on CPU) the way
   ``railtrain run --local`` does (:func:`railtrain.cli.local.plan_local`), rank 0
   serving its metrics on port 9400: the operator reads research/tiny's rank 0
   endpoint (``podIP:9400``) and reaches this real trainer, so the job's
   status.progress and goodput come from real steps; when the gang ends, the
   pods report its exit status. One rank is slowed so the straggler score moves,
   and ``--peak-tflops`` is this CPU's measured single-thread fp32 GEMM rate so
   MFU has a denominator;
3. starts stock Prometheus (bench/install-prometheus.sh) scraping the
   operator and both trainer nodes every 5 s; the trainer targets carry the
   ``namespace``/``trainingjob``/``node_rank`` labels the chart's PodMonitor
   gives trainer pods;
4. plays a scenario on the cluster: jobs that run and succeed, one that
   restarts (a retryable failure, then a hardware-suspect verdict that
   quarantines its node), one that fails, one that waits in the queue until
   capacity frees;
5. evaluates every panel's targets verbatim against Prometheus'
   ``/api/v1/query_range`` and draws the panels in the dashboard's gridPos
   layout with matplotlib (``pip install -e '.[docs]'``).

KWOK pods run no trainer: the pod failures are reported through KWOK (as
tests/operator/clusterkit.end_pod does), what the operator does about them is
real; research/tiny's numbers are the real local gang's.

    python bench/dashboard_render.py                   # writes docs/dashboard.png
    python bench/dashboard_render.py --out /tmp/d.png --trainer-steps 200
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard_panels as dp  # noqa: E402
from dashboard_scenario import log, loopback_nodes, poll, scenario  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "helm/railtrain/files/dashboard.json"
SCRAPE_SECONDS = 5
NO_DATA_WHY: dict[str, str] = {}
"""Why a panel whose query mentions a metric had no series, when this run knows why (metric name → sentence)."""


def cpu_peak_tflops(bursts: int = 30, seconds: float = 0.1, n: int = 512) -> float:
    """This CPU's peak fp32 GEMM TFLOP/s on one thread (the trainer runs 1 thread per process when a job has several):
    the best of ``bursts`` short bursts, since on a shared machine the mean measures the neighbours' load, not the peak."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(bursts):
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            count += 1
        best = max(best, 2 * n**3 * count / (time.perf_counter() - t0) / 1e12)
    return best


# -- the trainer gang (a child process: LocalGang handles SIGTERM in its main thread) --

def trainer_main(ports: list[int], steps: int, peak_tflops: float, slow: str, workdir: Path) -> int:
    """Run examples/tiny's gang as ``railtrain run --local`` would, with fixed metrics ports; returns the gang's exit status."""
    from railtrain.cli import local as local_run
    from railtrain.cli import local_checks, manifest

    job = local_checks.with_steps(manifest.read(str(REPO / "examples/tiny/trainingjob.yaml")).job(), steps)
    args = [a for a in job.spec.args] + ["--peak-tflops", f"{peak_tflops:.4f}"]
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"args": args})})
    faults = local_run.fault_environment({"bitflip": None, "slow": slow or None, "hang": None, "kill": None, "bad_batch": None})
    rdzv = local_run.free_ports(1)[0]
    nodes = local_run.plan_local(job, rdzv_port=rdzv, metrics_ports=ports, base_dir=workdir, extra_env=faults, uid=local_run.new_local_uid())
    return local_run.LocalGang(nodes, workdir=workdir, notify=lambda s: print(s, flush=True)).run()


# -- Prometheus ------------------------------------------------------------

def prometheus_config(operator_port: int, trainer_ports: list[int]) -> dict[str, Any]:
    """Scrape config: the operator, and each trainer node with the labels the chart's PodMonitor sets."""
    trainers = [{"targets": [f"127.0.0.1:{p}"], "labels": {"namespace": "research", "trainingjob": "tiny", "node_rank": str(r)}} for r, p in enumerate(trainer_ports)]
    return {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "scrape_configs": [
            {"job_name": "railtrain-operator", "static_configs": [{"targets": [f"127.0.0.1:{operator_port}"]}]},
            {"job_name": "railtrain-trainers", "honor_labels": False, "static_configs": trainers},
        ],
    }


def get_json(url: str, timeout: float = 10) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def query_range(base: str, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
    """Prometheus' answer to one range query."""
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    return get_json(f"{base}/api/v1/query_range?{q}")


# -- drawing ---------------------------------------------------------------

def evaluate(base: str, panels: list[dp.Panel], start: float, end: float, step: float) -> dict[int, list[tuple[str, str, list[float], list[float]]]]:
    """Every panel's series: ``(ref, legend, unix_seconds, values)``, each target evaluated as the dashboard writes it."""
    out: dict[int, list[tuple[str, str, list[float], list[float]]]] = {}
    for p in panels:
        rows = []
        for q in p.queries:
            for legend, ts, vs in dp.series(query_range(base, q.expr, start, end, step), q.legend):
                rows.append((q.ref, legend, ts, vs))
        out[p.id] = rows
    return out


def no_data_reason(panel: dp.Panel) -> str:
    for metric, why in NO_DATA_WHY.items():
        if any(metric in q.expr for q in panel.queries):
            return why
    return "no series in this run"


def draw(title: str, panels: list[dp.Panel], data: dict[int, list], out: Path, subtitle: str, width: float = 16.0) -> None:
    """Draw ``panels`` in their gridPos layout with their series; writes a PNG to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.ticker
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from datetime import datetime, timezone

    plt.rcParams.update({"font.size": 8, "axes.facecolor": "#181b1f", "figure.facecolor": "#111217", "text.color": "#d8d9da",
                         "axes.labelcolor": "#d8d9da", "xtick.color": "#9fa7b3", "ytick.color": "#9fa7b3", "axes.edgecolor": "#2c3235"})
    height, rects = dp.layout(panels, width)
    header = 1.0
    fig = plt.figure(figsize=(width, height + header))
    fig.text(0.01, 1 - 0.35 / (height + header), title, fontsize=14, weight="bold", va="center")
    fig.text(0.01, 1 - 0.75 / (height + header), subtitle, fontsize=8, color="#9fa7b3", va="center", linespacing=1.5)
    squeeze = height / (height + header)
    palette = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#96d98d", "#ffb357"]
    per_inch_x, per_inch_y = 1 / width, 1 / (height + header)  # figure fractions of one inch
    for p, (left, bottom, w, h) in rects:
        x0, y0, x1, y1 = left + 0.05 * per_inch_x, bottom * squeeze + 0.05 * per_inch_y, left + w - 0.05 * per_inch_x, (bottom + h) * squeeze - 0.05 * per_inch_y
        fig.add_artist(matplotlib.patches.FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.003",
                                                         transform=fig.transFigure, facecolor="#181b1f", edgecolor="#2c3235", linewidth=0.8, zorder=-1))
        fig.text(x0 + 0.1 * per_inch_x, y1 - 0.17 * per_inch_y, p.title, fontsize=10, color="#d8d9da", va="center")
        inset = (0.15, 0.1) if p.type == "stat" else (0.6, 0.35)  # room for tick labels (inches)
        ax = fig.add_axes((x0 + inset[0] * per_inch_x, y0 + inset[1] * per_inch_y, x1 - x0 - (inset[0] + 0.15) * per_inch_x, y1 - y0 - (inset[1] + 0.4) * per_inch_y))
        if p.type == "stat" or not (data.get(p.id) or []):
            ax.set_frame_on(False)
        rows = data.get(p.id) or []
        factor, suffix = dp.scale(p.unit)
        if not rows:
            ax.set_xticks([]), ax.set_yticks([])
            ax.text(0.5, 0.55, "No data", ha="center", va="center", fontsize=14, color="#9fa7b3", transform=ax.transAxes)
            ax.text(0.5, 0.35, no_data_reason(p), ha="center", va="center", fontsize=7.5, color="#9fa7b3", transform=ax.transAxes, wrap=True)
            continue
        if p.type == "stat":
            ax.set_xticks([]), ax.set_yticks([])
            shown = rows[:3]
            for i, (_ref, legend, ts, vs) in enumerate(shown):
                value = dp.stat_value(vs)
                middle = 1 - (i + 0.5) / len(shown)
                ax.text(0.5, middle + 0.06, f"{value * factor:.4g}{suffix}", ha="center", va="center", fontsize=34 if len(shown) == 1 else 20, weight="bold",
                        color=palette[0] if not value else palette[4], transform=ax.transAxes)
                ax.text(0.5, middle - 0.22 / len(shown), legend, ha="center", va="center", fontsize=8, color="#9fa7b3", transform=ax.transAxes)
            continue
        times = lambda ts: [datetime.fromtimestamp(t, tz=timezone.utc) for t in ts]  # noqa: E731
        if p.stacked:
            grid = sorted({t for _r, _l, ts, _v in rows for t in ts})
            stack = [[dict(zip(ts, vs)).get(t, 0.0) * factor for t in grid] for _r, _l, ts, vs in rows]
            ax.stackplot(times(grid), *stack, labels=[r[1] for r in rows], colors=palette[: len(rows)], alpha=0.6, step="post")
        else:
            for i, (_ref, legend, ts, vs) in enumerate(rows):
                ax.plot(times(ts), [v * factor for v in vs], label=legend, color=palette[i % len(palette)], linewidth=1.4)
        ax.xaxis.set_major_locator(mdates.MinuteLocator(tz=timezone.utc))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=timezone.utc))
        ax.grid(color="#2c3235", linewidth=0.6)
        if suffix:
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos, s=suffix: f"{v:g}{s}"))
        ax.legend(loc="upper left", fontsize=6.5, ncol=1 if len(rows) < 5 else 2, framealpha=0.4, facecolor="#181b1f", edgecolor="#2c3235", labelcolor="#d8d9da")
    fig.savefig(out, dpi=80)
    plt.close(fig)


# -- main ----------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the cluster, trainer and Prometheus, draw the dashboard; returns the exit status."""
    parser = argparse.ArgumentParser(prog="dashboard_render.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs/dashboard.png", help="PNG to write (default docs/dashboard.png).")
    parser.add_argument("--prometheus", default=None, help="Prometheus binary (default: bench/install-prometheus.sh builds or finds it).")
    parser.add_argument("--beat", type=float, default=30.0, help="Seconds between the scenario's events (default 30).")
    parser.add_argument("--trainer-steps", type=int, default=200, help="Steps of the tiny trainer gang; the scenario waits for it to end (default 200).")
    parser.add_argument("--slow", default="rank=1,factor=1.6,from_step=80", help="--fault-slow of the trainer gang ('' for none).")
    parser.add_argument("--trainer", default=None, help=argparse.SUPPRESS)  # internal: "PORT,PORT:STEPS:PEAK" runs the gang in this process
    args = parser.parse_args(argv)
    if args.trainer:
        ports, steps, peak = args.trainer.split(":")
        return trainer_main([int(p) for p in ports.split(",")], int(steps), float(peak), args.slow, Path.cwd())

    from kwokbench import BenchCluster

    from railtrain.cli import local as local_run
    from railtrain.cli.controlplane.operator_process import OperatorProcess
    from railtrain.crds import contract
    from railtrain.operator.metrics import ENV_PORT

    prom_bin = args.prometheus or subprocess.run([str(REPO / "bench/install-prometheus.sh")], check=True, capture_output=True, text=True).stdout.strip()
    dashboard = dp.load(DASHBOARD)
    variables = {"datasource": "prometheus"}  # the only variable; no target's expr uses one (checked below)
    panels = dp.panels(dashboard, variables)
    peak = cpu_peak_tflops()
    log(f"CPU peak (1 thread, fp32 GEMM 512^3, best of 30 bursts): {peak:.4f} TFLOP/s, given to the trainer as --peak-tflops")
    work = Path(tempfile.mkdtemp(prefix="railtrain-dashboard-"))
    op_port, prom_port, rank1_port = local_run.free_ports(3)
    trainer_ports = [contract.DEFAULT_METRICS_PORT, rank1_port]  # rank 0 where the operator reads a pod's metrics
    (work / "prometheus.yml").write_text(json.dumps(prometheus_config(op_port, trainer_ports)))  # JSON is YAML
    procs: list[subprocess.Popen] = []
    with BenchCluster("dashboard") as bc:
        nodes = bc.add_nodes(12, 8, nodes_per_rack=4, racks_per_block=3)
        loopback = loopback_nodes(bc)
        log(f"{bc.local.name}: Kubernetes {bc.version}, {len(nodes)} KWOK nodes x 8 GPUs, and {len(loopback)} for research/tiny with pod IPs on 127.0.0.0/8")
        operator = OperatorProcess(bc.local.kubeconfig, work / "operator.log", resync_seconds=5, env={ENV_PORT: str(op_port)})
        try:
            operator.start()
            procs.append(subprocess.Popen([prom_bin, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
                                           f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=open(work / "prometheus.log", "w"), stderr=subprocess.STDOUT))
            base = f"http://127.0.0.1:{prom_port}"
            poll(lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200, 60, "Prometheus ready")
            poll(lambda: urllib.request.urlopen(f"http://127.0.0.1:{op_port}/metrics", timeout=2).status == 200, 60, "the operator's /metrics")
            # a first scrape before any job: counters and histograms start from a sample, so increase() sees every event
            up = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="railtrain-operator"} == 1'})
            poll(lambda: get_json(up)["data"]["result"], 60, "Prometheus' first scrape of the operator")
            start = time.time() - 2 * SCRAPE_SECONDS

            def start_trainer() -> subprocess.Popen:
                trainer = subprocess.Popen([sys.executable, __file__, "--trainer", f"{trainer_ports[0]},{trainer_ports[1]}:{args.trainer_steps}:{peak:.6f}", "--slow", args.slow],
                                           cwd=work, stdout=open(work / "trainer.log", "w"), stderr=subprocess.STDOUT)
                procs.append(trainer)
                return trainer

            events = scenario(bc, args.beat, start_trainer)
            time.sleep(max(2 * SCRAPE_SECONDS, args.beat / 2))
            operator.check()
            end = time.time()
            data = evaluate(base, panels, start, end, SCRAPE_SECONDS)
        except BaseException:
            print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            raise
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        p.kill()
            operator.stop()
    unused = [v for v in dp.variables_used(dashboard) if v not in variables]
    version = subprocess.run([prom_bin, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    window = f"{time.strftime('%H:%M', time.gmtime(start))}-{time.strftime('%H:%M', time.gmtime(end))} UTC"
    subtitle = (f"rendered by bench/dashboard_render.py at {commit} from {version.split(' (')[0]} ({window}, step {SCRAPE_SECONDS}s); docs/dashboard.md\n"
                f"the real operator on the local control plane with 14 KWOK nodes x 8 GPUs; research/tiny's rank metrics from a real examples/tiny gang (2 x 1 CPU process, gloo)")
    draw(dashboard.get("title", "dashboard"), panels, data, args.out, subtitle)
    log(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB); variables used by targets: {dp.variables_used(dashboard) or 'none'}{' (unset: ' + ','.join(unused) + ')' if unused else ''}")
    for p in panels:
        rows = data.get(p.id) or []
        last = ", ".join(f"{legend}={vs[-1]:.3g}" for _r, legend, _ts, vs in rows[:6])
        print(f"  panel {p.id:2} {p.title[:48]:48} {len(rows):2} series  {last or 'NO DATA: ' + no_data_reason(p)}")
    print("events:\n  " + "\n  ".join(events))
    print(f"logs and TSDB: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
