"""The watch-fed cache's ordering rules (operator/kube/informer.py), without a cluster: an older version never wins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from railtrain.operator.kube.informer import Store, older


def obj(name, rv, ns="a", phase="Running"):
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)}, "status": {"phase": phase}}


def names(store):
    return sorted(o["metadata"]["name"] for o in store.items())


def test_resource_versions_compare_as_integers_and_unknown_ones_never_count_as_older():
    assert older("9", "10") and not older("10", "9") and not older("10", "10")
    assert not older("abc", "10") and not older("9", None)


def test_an_older_event_never_replaces_a_newer_object():
    s = Store()
    assert s.apply("ADDED", obj("p", 12))  # e.g. the operator's own write, applied at once
    assert not s.apply("MODIFIED", obj("p", 11))  # the watch delivers an earlier version late
    assert s.get(("a", "p"))["metadata"]["resourceVersion"] == "12"
    assert s.apply("MODIFIED", obj("p", 13))
    assert s.get(("a", "p"))["metadata"]["resourceVersion"] == "13"


def test_deleted_removes_but_an_older_deletion_does_not_remove_a_newer_object():
    s = Store()
    s.apply("ADDED", obj("p", 20))  # a pod re-created under the same name
    assert not s.apply("DELETED", obj("p", 15))  # the late deletion of its predecessor
    assert names(s) == ["p"]
    assert s.apply("DELETED", obj("p", 21))
    assert names(s) == []


def test_a_deleted_object_is_not_brought_back_by_an_older_version():
    s = Store()
    s.apply("ADDED", obj("p", 5))
    s.apply("DELETED", obj("p", 8))
    assert not s.apply("MODIFIED", obj("p", 7))  # a read answered before the delete, applied after it
    assert names(s) == []
    assert s.apply("ADDED", obj("p", 9))  # a new object of that name
    assert names(s) == ["p"]


def test_an_object_leaving_the_field_selector_leaves_the_store():
    active = Store(keep=lambda o: o["status"]["phase"] not in ("Succeeded", "Failed"))
    active.apply("ADDED", obj("p", 3))
    assert active.apply("MODIFIED", obj("p", 4, phase="Succeeded"))  # e.g. read fresh by a reconcile
    assert names(active) == []
    assert not active.apply("MODIFIED", obj("p", 3))  # the watch's older Running version stays out


def test_a_relist_is_the_truth_except_where_the_store_knows_newer():
    s = Store()
    for name, rv in (("old", 5), ("kept", 6), ("written", 30)):
        s.apply("ADDED", obj(name, rv))
    s.apply("DELETED", obj("deleted-late", 25))
    # LIST taken at 20: "old" was deleted before it, "kept" changed, "written" was written by the operator after it
    s.replace([obj("kept", 7), obj("deleted-late", 18), obj("new", 19)], "20")
    assert names(s) == ["kept", "new", "written"]
    assert s.get(("a", "kept"))["metadata"]["resourceVersion"] == "7"
    assert not s.apply("MODIFIED", obj("old", 5))  # absent from a LIST at 20: a version up to 20 is stale
    assert s.apply("MODIFIED", obj("old", 21))


def test_forget_absent_drops_only_the_subset_and_only_what_the_list_is_newer_than():
    s = Store()
    s.apply("ADDED", obj("j-0", 5))
    s.apply("ADDED", obj("j-1", 40))  # created after the list below
    s.apply("ADDED", obj("other", 5))
    s.forget_absent([], lambda o: o["metadata"]["name"].startswith("j-"), "30")
    assert names(s) == ["j-1", "other"]


def test_two_lists_finishing_out_of_order_never_undo_the_newer_one():
    s = Store()
    s.replace([obj("p", 100)], "120")  # the newer LIST (a leader's refresh) finishes first: "q" was deleted at 110
    s.replace([obj("p", 100), obj("q", 90)], "100")  # the older one, taken before that deletion, finishes second
    assert names(s) == ["p"]
    assert not s.apply("MODIFIED", obj("q", 95))


def test_stored_objects_leave_managed_fields_out():
    s = Store()
    pod = obj("p", 3)
    pod["metadata"]["managedFields"] = [{"manager": "railtrain-operator", "fieldsV1": {}}]
    s.apply("ADDED", pod)
    listed = obj("q", 4)
    listed["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    s.replace([s.get(("a", "p")), listed], "5")
    assert all("managedFields" not in o["metadata"] for o in s.items())


def labelled(name, rv, job, ns="a", phase="Running"):
    o = obj(name, rv, ns, phase)
    o["metadata"]["labels"] = {"job": job}
    return o


def by_job(o):
    job = o["metadata"].get("labels", {}).get("job")
    return (o["metadata"]["namespace"], job) if job else None


def test_the_index_finds_one_jobs_objects_and_follows_deletes_relists_and_label_changes():
    s = Store(keep=lambda o: o["status"]["phase"] != "Failed", index=by_job)
    s.apply("ADDED", labelled("j-0", 1, "j"))
    s.apply("ADDED", labelled("j-1", 2, "j"))
    s.apply("ADDED", labelled("k-0", 3, "k"))
    s.apply("ADDED", labelled("j-0", 1, "j", ns="b"))
    assert sorted(o["metadata"]["name"] for o in s.indexed(("a", "j"))) == ["j-0", "j-1"]
    s.apply("DELETED", labelled("j-0", 4, "j"))
    s.apply("MODIFIED", labelled("j-1", 5, "j", phase="Failed"))  # leaves the store through `keep`
    assert s.indexed(("a", "j")) == []
    s.apply("MODIFIED", labelled("k-0", 6, "j"))  # relabelled: found under its new value only
    assert [o["metadata"]["name"] for o in s.indexed(("a", "j"))] == ["k-0"] and s.indexed(("a", "k")) == []
    s.replace([labelled("k-0", 6, "j"), labelled("m-0", 7, "m")], "8")
    assert [o["metadata"]["name"] for o in s.indexed(("a", "m"))] == ["m-0"] and s.indexed(("b", "j")) == []
    s.forget_absent([], lambda o: True, "9")
    assert s.indexed(("a", "j")) == [] and s.indexed(("a", "m")) == [] and Store().indexed(("a", "j")) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "relist", "forget"]),
                          st.integers(0, 5), st.integers(1, 60), st.sampled_from(["j", "k", None]),
                          st.sampled_from(["Running", "Failed"])), max_size=40))
def test_the_index_always_agrees_with_a_scan_of_the_store(events):
    s = Store(keep=lambda o: o["status"]["phase"] != "Failed", index=by_job)

    def make(i, rv, job, phase):
        o = obj(f"p-{i}", rv, phase=phase)
        if job:
            o["metadata"]["labels"] = {"job": job}
        return o

    for kind, i, rv, job, phase in events:
        if kind == "relist":
            s.replace([make(i, rv, job, phase)], str(rv))
        elif kind == "forget":
            s.forget_absent([], lambda o: by_job(o) == ("a", job), str(rv))
        else:
            s.apply(kind, make(i, rv, job, phase))
        for value in [("a", "j"), ("a", "k")]:
            scanned = sorted(o["metadata"]["name"] for o in s.items() if by_job(o) == value)
            assert sorted(o["metadata"]["name"] for o in s.indexed(value)) == scanned
