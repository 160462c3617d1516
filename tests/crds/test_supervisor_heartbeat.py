"""A supervisor's heartbeat while its main loop is busy: stopping its workers (SIGTERM, a grace, SIGKILL) takes
seconds, more under load, and a supervisor silent that long was taken for lost (a hot spare given its rank, or the
gang restarted: tests/cli/test_local_spares.py under load, stops 43, 44 and 47). A real coordinator served over HTTP,
a real Supervisor, a worker that ignores SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from railtrain.crds import contract, inplace, recovery
from railtrain.crds.api import RunPolicy
from railtrain.crds.coordinator import Coordinator, serve
from railtrain.crds.supervisor import ENV_LOST, ENV_SUPERVISOR_PORT, ENV_WARM, PEER_STOP_GRACE_SECONDS, Supervisor

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"


def test_a_supervisor_stopping_stubborn_workers_keeps_asking_and_is_never_taken_for_lost(tmp_path):
    """Lost after 1 s of silence (the job's shortest setting); stopping the workers takes the 2 s grace and more. Rank
    0 failed and reported; rank 1's supervisor sees it and stops its workers. On the old code rank 1 asked nothing
    while it waited, and the coordinator found it lost within that wait."""
    c = Coordinator(2, RunPolicy(), recovery.Counters(), inplace.Ledger(), lost_seconds=1.0, settle_seconds=120.0)
    c.server = serve(c, 0)
    try:
        env = {contract.ENV_NODE_RANK: "1", contract.ENV_NNODES: "2", contract.ENV_RDZV_ADDR: "127.0.0.1",
               ENV_SUPERVISOR_PORT: str(c.server.server_port), ENV_LOST: "1", ENV_WARM: "off",
               contract.ENV_TERMINATION_MESSAGE_PATH: str(tmp_path / "message")}  # fmt: skip
        supervisor = Supervisor(["unused"], env)
        worker = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, start_new_session=True)
        assert worker.stdout.readline().strip() == b"ready"
        assert c.report({"attempt": 0, "rank": 0, "code": 1, "message": None, "finished": time.time(), "node": "n0"})
        lost_seen: list[float] = []
        done = threading.Event()

        def judge() -> None:  # the host's loop: steps, and looks for rank 1 among the lost
            while not done.wait(0.05):
                now = time.monotonic()
                c.step(now=now)
                if 1 in c.lost(now):
                    lost_seen.append(now)

        thread = threading.Thread(target=judge, daemon=True)
        thread.start()
        started = time.monotonic()
        code, stopped = supervisor._watch(worker, 0)
        took = time.monotonic() - started
        done.set()
        thread.join()
        assert stopped and code == 128 + 9 and took >= PEER_STOP_GRACE_SECONDS  # SIGTERM ignored: the grace, then SIGKILL
        assert lost_seen == [], f"rank 1 counted as lost {lost_seen[0] - started:.2f} s into a {took:.2f} s stop"
        assert c.holders == {} and 1 in c.seen
    finally:
        c.server.shutdown()


HOST = """
import os, sys, time
from railtrain.crds import inplace, recovery, supervisor
from railtrain.crds.api import RunPolicy
from railtrain.crds.coordinator import Coordinator, serve

class Slow(Coordinator):
    def state(self, *args, **kwargs):
        out = super().state(*args, **kwargs)  # the read counts here ...
        time.sleep(1.0)  # ... and its answer is written a second later (a loaded machine)
        return out

c = Slow(2, RunPolicy(), recovery.Counters(), inplace.Ledger(), host=1)
for rank in (0, 1):
    c.report({"attempt": 0, "rank": rank, "code": 0, "message": None, "finished": 1.0, "node": f"n{rank}"})
assert c.step()["path"] == "done"
c.server = serve(c, 0)
print(c.server.server_port, flush=True)
if sys.argv[1] == "supervisor":
    supervisor.stay_until_the_end_is_read(c, [c], time.monotonic() + 30)
else:  # the wait before stop 48: until every rank's read counted
    while not c.everyone_saw_the_end():
        time.sleep(0.05)
os._exit(0)  # the supervisor's process ends: its server threads with it
"""


def ask_the_end(wait: str) -> dict | str:
    import json
    import urllib.request

    host = subprocess.Popen([sys.executable, "-c", HOST, wait], stdout=subprocess.PIPE, text=True)
    try:
        port = int(host.stdout.readline())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/state?rank=0", timeout=30) as answer:
                return json.loads(answer.read())
        except OSError as err:  # http.client's RemoteDisconnected is a ConnectionResetError
            return type(err).__name__
    finally:
        host.wait(timeout=60)


def test_a_host_leaving_after_the_final_decision_lets_the_last_reader_have_its_answer():
    """Stop 48's runs of the lost-coordinator test: the host's rank finished, the gang was done, and the host's
    supervisor exited the moment the spare's read of the final decision counted, before the answer was written. The
    spare never saw the end, took the host for lost, hosted the coordinator from its copy and gave the finished rank
    to another spare (a second refill). The host now also waits until its server answered every request it accepted
    (``stay_until_the_end_is_read``). The old wait, kept in the host script as the control, cuts the answer off."""
    assert ask_the_end("old") in ("RemoteDisconnected", "ConnectionResetError", "BadStatusLine", "IncompleteRead")
    answer = ask_the_end("supervisor")
    assert isinstance(answer, dict) and answer["final"] and answer["decisions"]["0"]["path"] == "done", answer
