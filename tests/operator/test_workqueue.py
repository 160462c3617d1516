"""Reconcile requests coalesced per job (operator/coalescer.py): real threads, no sleeps, every wait has a deadline."""

from __future__ import annotations

import threading

from railtrain.operator.coalescer import Coalescer
from tests.polling import wait_for


def test_requests_arriving_while_one_waits_for_the_jobs_lock_run_once_after_it():
    queue, lock, runs = Coalescer(), threading.Lock(), []
    lock.acquire()  # a reconcile of the job is running
    threads = [threading.Thread(target=queue.run, args=(("ns", "job"), lock, lambda: runs.append(1))) for _ in range(20)]
    for t in threads:
        t.start()
    # One request waits for the lock; the other 19 return at once, absorbed by it.
    wait_for(lambda: queue.coalesced == 19, 10, "19 requests absorbed by the waiting one")
    assert queue.waiting(("ns", "job")) and not runs
    lock.release()
    for t in threads:
        t.join(10)
    assert runs == [1] and not queue.waiting(("ns", "job"))


def test_a_request_made_after_a_reconcile_started_runs_again_after_it():
    queue, lock = Coalescer(), threading.Lock()
    started, release, runs = threading.Event(), threading.Event(), []

    def first():
        started.set()
        release.wait(10)  # still reading: a change now may be too late for this run
        runs.append("first")

    t = threading.Thread(target=queue.run, args=("job", lock, first))
    t.start()
    assert started.wait(10) and not queue.waiting("job")
    second = threading.Thread(target=queue.run, args=("job", lock, lambda: runs.append("second")))
    second.start()
    wait_for(lambda: queue.waiting("job"), 10, "the later request queued, not absorbed")
    release.set()
    t.join(10)
    second.join(10)
    assert runs == ["first", "second"] and queue.coalesced == 0


def test_other_jobs_are_not_held_back_and_errors_leave_nothing_waiting():
    queue, lock = Coalescer(), threading.Lock()
    lock.acquire()
    blocked = threading.Thread(target=queue.run, args=("a", lock, lambda: None))
    blocked.start()
    wait_for(lambda: queue.waiting("a"), 10, "job a waiting for its lock")
    assert queue.run("b", threading.Lock(), lambda: "done") == (True, "done")
    lock.release()
    blocked.join(10)

    def boom():
        raise RuntimeError("API server gone")

    try:
        queue.run("c", threading.Lock(), boom)
    except RuntimeError:
        pass
    assert not queue.waiting("c") and queue.run("c", threading.Lock(), lambda: 1) == (True, 1)
