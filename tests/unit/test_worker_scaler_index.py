"""What the autoscaler keeps of a worker Deployment from the watch: parsed, hashable, stable."""

from __future__ import annotations

from typing import Any

from pdfqueue_operator.worker_scaler import WorkerDeployment


def body(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "metadata": {
            "namespace": "jobs",
            "name": "pdfqueue-worker",
            "uid": "u-1",
            "annotations": {"pdfqueue.io/max-replicas": "4", "pdfqueue.io/queue": "q"},
        },
        "spec": {"selector": {"matchLabels": {"b": "2", "a": "1"}}},
        "status": {"readyReplicas": 3},
    }
    for key, value in over.items():
        doc[key] = value
    return doc


def test_a_deployment_is_read_with_sorted_annotations_and_labels() -> None:
    got = WorkerDeployment.from_body(body())
    assert got.key == ("jobs", "pdfqueue-worker")
    assert got.annotations == (("pdfqueue.io/max-replicas", "4"), ("pdfqueue.io/queue", "q"))
    assert got.match_labels == (("a", "1"), ("b", "2"))
    assert got.ready == 3
    assert got.reference == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": "jobs",
        "name": "pdfqueue-worker",
        "uid": "u-1",
    }
    # kopf's index compares entries: the same body in another key order is the same entry
    reordered = body(spec={"selector": {"matchLabels": {"a": "1", "b": "2"}}})
    assert WorkerDeployment.from_body(reordered) == got
    assert hash(WorkerDeployment.from_body(reordered)) == hash(got)


def test_a_new_deployment_without_status_selector_or_annotations_is_read_as_empty() -> None:
    meta = {"namespace": "jobs", "name": "w", "uid": "u-2", "annotations": None}
    got = WorkerDeployment.from_body({"metadata": meta, "spec": None})
    assert (got.annotations, got.match_labels, got.ready) == ((), (), 0)
    got = WorkerDeployment.from_body(body(status={"readyReplicas": None}, spec={}))
    assert (got.match_labels, got.ready) == ((), 0)
