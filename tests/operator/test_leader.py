"""Leader election without a cluster: the Lease rules (operator/lease.py) and the loop (operator/leader.py) over a fake API."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from railtrain.operator import handlers, leader, resync
from railtrain.operator import lease
from railtrain.operator.context import OperatorContext
from railtrain.operator.serve import Health
from railtrain.operator.settings import Settings

from .builders import job_obj, node
from .test_controller import NOW, FakeKube


def context(kube, identity="me/1", lease_seconds=10.0, health=None) -> OperatorContext:
    return OperatorContext(Settings(resync_seconds=0.01, lease_seconds=lease_seconds), kube, identity=identity, health=health or Health())


async def until_leading(ctx: OperatorContext, seconds: float = 4.0) -> None:
    """Poll (every 0.1 s, up to ``seconds``) until ``ctx`` holds the Lease; the caller asserts it."""
    for _ in range(int(seconds / 0.1)):
        await asyncio.sleep(0.1)
        if ctx.state.leader:
            return


def test_lease_spec_renews_keeping_acquire_time_and_counts_takeovers():
    first = lease.lease_spec("a/1", NOW, 10)
    assert first["holderIdentity"] == "a/1" and first["leaseDurationSeconds"] == 10 and first["leaseTransitions"] == 0
    renewed = lease.lease_spec("a/1", NOW + timedelta(seconds=2), 10, {"spec": first})
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["renewTime"] != first["renewTime"] and renewed["leaseTransitions"] == 0
    taken = lease.lease_spec("b/2", NOW + timedelta(seconds=20), 10, {"spec": renewed})
    assert taken["acquireTime"] == taken["renewTime"] and taken["leaseTransitions"] == 1
    assert lease.holder({"spec": renewed}, NOW + timedelta(seconds=11)) == "a/1"
    assert lease.holder({"spec": renewed}, NOW + timedelta(seconds=12)) is None  # not renewed for 10 s: gone


def test_try_lead_takes_a_free_or_expired_lease_never_a_held_one():
    kube = FakeKube([], [])
    ns = Settings().lease_namespace
    kube.put_lease(ns, lease.LEASE_NAME, lease.lease_spec("other/7", NOW, 10), None)
    me = context(kube)
    assert leader._try_lead(me, NOW + timedelta(seconds=5)) == (False, "other/7")
    assert kube.get_lease(ns, lease.LEASE_NAME)["spec"]["holderIdentity"] == "other/7"
    assert leader._try_lead(me, NOW + timedelta(seconds=10)) == (True, None)
    assert kube.get_lease(ns, lease.LEASE_NAME)["spec"]["holderIdentity"] == "me/1"


def test_a_leader_whose_resync_is_stale_stops_renewing():
    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    clock = Clock()
    kube = FakeKube([], [])
    me = context(kube, health=Health(stale_seconds=30, clock=clock))
    assert leader._try_lead(me, NOW) == (True, None)
    me.state.leader = True
    clock.t = 31  # no resync pass for 31 s
    assert leader._try_lead(me, NOW + timedelta(seconds=2)) == (False, None)
    assert kube.get_lease(me.settings.lease_namespace, lease.LEASE_NAME)["spec"]["renewTime"] == lease.lease_spec("x", NOW)["renewTime"]


def test_the_loop_stands_by_then_leads_and_wakes_the_resync_when_the_holder_gives_up(caplog):
    kube = FakeKube([], [])
    ns = Settings().lease_namespace
    now = datetime.now(timezone.utc)
    kube.put_lease(ns, lease.LEASE_NAME, lease.lease_spec("other/7", now, 10), None)
    me = context(kube, lease_seconds=2.5)  # polls every 0.31 s
    woken = []

    async def run():
        task = asyncio.create_task(leader.keep_lease(me, lambda: woken.append(True)))
        await asyncio.sleep(1.2)
        assert not me.state.leader and not woken
        kube.put_lease(ns, lease.LEASE_NAME, {}, kube.get_lease(ns, lease.LEASE_NAME))  # the holder stops and gives it up
        await until_leading(me)
        task.cancel()

    with caplog.at_level(logging.INFO, "railtrain.operator"):
        asyncio.run(run())
    assert me.state.leader and woken == [True]
    lines = [r.getMessage() for r in caplog.records]
    assert sum("standing by: the Lease default/railtrain-operator is held by other/7" in m for m in lines) == 1  # said once, not per poll
    assert any(m.startswith("leading: this operator (me/1)") for m in lines)
    assert me.health.last_pass is not None  # a standby's Lease checks count as passes (/healthz)


def test_a_standby_neither_reconciles_nor_admits():
    kube = FakeKube([node("n0")], [job_obj("waiting", nodes=1)])
    me = context(kube)
    resync.resync_pass(me)
    handlers.on_job_event(type="ADDED", name="waiting", namespace="team", memo=me)
    assert kube.pods == {} and "status" not in kube.jobs[("team", "waiting")]


def test_lost_contact_with_the_api_server_is_said_once_and_its_return_once(caplog):
    class Flaky(FakeKube):
        down = True

        def get_lease(self, ns, name):
            if self.down:
                raise ConnectionRefusedError("connection refused")
            return super().get_lease(ns, name)

    kube = Flaky([], [])
    me = context(kube, lease_seconds=2.0)  # polls every 0.25 s
    me.state.leader = True

    async def run():
        task = asyncio.create_task(leader.keep_lease(me, lambda: None))
        for _ in range(60):  # past the lease duration: the leader steps down while the server stays away
            await asyncio.sleep(0.1)
            if not me.state.leader:
                break
        await asyncio.sleep(0.6)  # a few more failed polls while standing by
        kube.down = False
        await until_leading(me)
        task.cancel()

    with caplog.at_level(logging.INFO, "railtrain.operator"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records]
    assert me.state.leader
    assert sum(m.startswith("could not renew the Lease default/railtrain-operator") for m in lines) == 1, lines
    assert sum(m.startswith("no longer leading") for m in lines) == 1
    assert sum(m.startswith("the API server answers again") for m in lines) == 1
