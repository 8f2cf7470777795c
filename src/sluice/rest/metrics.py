"""`GET /metrics`: the worker's metrics in Prometheus' text format (prometheus-client).

The metrics are the registry's (`sluice.runtime.metrics.names`: Kafka Connect's names, written the
Prometheus way, `source-record-poll-total` -> `sluice_source_record_poll_total`); every scrape asks
the herder for one report (`Herder.metrics`, one read per store) and only writes its figures out.
docs/operations.md lists every metric and where it comes from.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from sluice.rest._common import herder_of
from sluice.rest._routes import GuardedRoute
from sluice.runtime.metrics.figures import Figure, MetricsReport
from sluice.runtime.metrics.names import METRICS

router = APIRouter(tags=["metrics"], route_class=GuardedRoute)


class _Report:
    """A prometheus-client collector over one `Herder.metrics()` report."""

    def __init__(self, report: MetricsReport) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        by_metric: dict[str, list[Figure]] = {}
        for figure in self.report.figures:
            by_metric.setdefault(figure.metric, []).append(figure)
        for metric in METRICS:
            figures = by_metric.get(metric.name, [])
            if not figures and not metric.always:
                continue
            kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            family = kind(metric.exposed_name, metric.doc, labels=list(metric.labels))
            for figure in figures:
                family.add_metric(list(figure.labels), figure.value)
            yield family


def render(report: MetricsReport) -> bytes:
    """The Prometheus text of one report, plus this process's RSS, CPU and open files."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Report(report))  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    return generate_latest(registry)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus text format (version 0.0.4)."""
    report = await run_in_threadpool(herder_of(request).metrics)
    return Response(render(report), media_type=CONTENT_TYPE_LATEST)
