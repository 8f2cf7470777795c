"""The one registry of metric names (`sluice.runtime.metrics.names`) and the figures made from a
snapshot (`sluice.runtime.metrics.figures`): every figure names a registered metric with its
labels, and `/metrics` writes exactly the registry's families."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.rest.metrics import render
from sluice.runtime.metrics.figures import Figure, MetricsReport, report_of
from sluice.runtime.metrics.names import BY_NAME, METRICS


def _source(name: str) -> dict:
    return {
        "name": name,
        "type": "source",
        "state": "RUNNING",
        "tasks": {"RUNNING": 2},
        "counters": {"records-total": 10, "total-records-skipped": 3, "batches-total": 4},
        "progress": {
            "num_input_rows": 5,
            "input_rows_per_second": 1.5,
            "processed_rows_per_second": 2.5,
            "batch_duration_ms": 120,
            "avg_batch_ms": 100,
            "max_batch_ms": 200,
        },
        "lag": [],
        "source_lag": [{"partition": '{"filename": "/in"}', "unit": "bytes", "lag": 42}],
        "last_error_timestamp": 1700000000.0,
    }


def _sink(name: str) -> dict:
    return {
        "name": name,
        "type": "sink",
        "state": "FAILED",
        "tasks": {"FAILED": 1},
        "counters": {"records-total": 7},
        "progress": None,
        "lag": [{"topic": "t", "queue": 0, "lag": 3}, {"topic": "t", "queue": 1, "lag": 9}],
    }


SNAPSHOT = {
    "worker": {
        "worker_id": "w1",
        "jvm": {"heap_used": 1, "heap_committed": 2, "heap_max": 3},
    },
    "connectors": [_source("src"), _sink("dst")],
}


def test_the_registry_names_each_metric_and_each_family_once() -> None:
    names = [m.name for m in METRICS]
    exposed = [m.exposed_name for m in METRICS]
    assert len(set(names)) == len(names) and len(set(exposed)) == len(exposed)
    assert BY_NAME["source-record-poll-total"].exposed_name == "sluice_source_record_poll"
    assert BY_NAME["sink-record-lag"].exposed_name == "sluice_sink_record_lag"


def test_a_snapshot_becomes_figures_of_registered_metrics_with_their_labels() -> None:
    report = report_of(SNAPSHOT)
    assert report.worker_id == "w1"
    for figure in report.figures:
        assert len(figure.labels) == len(BY_NAME[figure.metric].labels), figure
    assert report.value("source-record-poll-total", "src") == 10
    assert report.value("source-record-write-total", "src") == 7  # polled - skipped
    assert report.value("sink-record-send-total", "dst") == 7
    assert report.value("sink-record-lag", "dst", "t", "1") == 9
    assert report.value("sink-record-lag-max", "dst") == 9
    assert report.value("source-lag-bytes", "src", '{"filename": "/in"}') == 42
    assert report.value("connector-count", "RUNNING") == 1
    assert report.value("task-count", "RUNNING") == 2
    assert report.value("jvm-heap-bytes", "max") == 3
    assert report.value("push-succeeded", "dst") is None  # not a push sink
    assert report.of("completed-rebalances-total") == []  # standalone: no rebalances


def test_a_figure_of_an_unregistered_metric_is_refused_naming_it() -> None:
    bad = {**_source("src"), "source_lag": [{"partition": "p", "unit": "furlongs", "lag": 1}]}
    with pytest.raises(KeyError, match="source-lag-furlongs"):
        report_of({"worker": {"worker_id": "w1"}, "connectors": [bad]})


def test_metrics_writes_every_family_the_registry_shows_and_nothing_else() -> None:
    text = render(report_of(SNAPSHOT)).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    ours = {name for name in families if name.startswith("sluice_")}
    always = {m.exposed_name for m in METRICS if m.always}
    assert ours == always | {"sluice_jvm_heap_bytes"}
    # a report without figures still shows every family a dashboard expects
    empty = render(MetricsReport("w1", ())).decode()
    shown = {f.name for f in text_string_to_metric_families(empty) if f.name.startswith("sluice_")}
    assert shown == always


def test_a_figure_is_written_under_its_labels() -> None:
    text = render(MetricsReport("w1", (Figure("sink-record-lag", ("dst", "t", "0"), 5),))).decode()
    samples = [
        s for f in text_string_to_metric_families(text) for s in f.samples if f.name.endswith("lag")
    ]
    assert [(s.labels, s.value) for s in samples] == [
        ({"connector": "dst", "topic": "t", "queue": "0"}, 5)
    ]
