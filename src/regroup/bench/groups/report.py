"""Results of the group benchmarks: one :class:`RunResult` per broker, rendered as a table or as JSON.

With two brokers the table gets a ratio column, first broker / second broker (regroup / Kafka): above 1
means a larger number for the first broker, so better for rates and worse for times and latencies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Metric", "RunResult", "payload", "ratio", "render"]

JSON_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Metric:
    phase: str
    name: str
    value: float | None
    unit: str
    # CPU and bookkeeping rows get no ratio.
    compare: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return self.phase, self.name


@dataclass(slots=True)
class RunResult:
    broker: str
    version: str
    bootstrap: str
    nodes: int = 1  # brokers of the cluster the run was on
    settings: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def add(self, phase: str, name: str, value: float | None, unit: str, *, compare: bool = True) -> None:
        self.metrics.append(Metric(phase, name, value, unit, compare))

    def value(self, phase: str, name: str) -> float | None:
        for m in self.metrics:
            if m.key == (phase, name):
                return m.value
        return None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit in ("", "count") or (float(value).is_integer() and abs(value) >= 100):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 0.01 else f"{value:.2f}"


def render(title: str, params: Mapping[str, Any], runs: Sequence[RunResult]) -> str:
    """A human-readable table: one row per (phase, metric), one column per broker."""
    lines = [title, "  " + ", ".join(f"{k}={v}" for k, v in params.items())]
    for run in runs:
        settings = ", ".join(f"{k}={v}" for k, v in run.settings.items()) or "(not reported)"
        lines.append(f"  {run.broker} ({run.version}) at {run.bootstrap}: {settings}")
        if run.error:
            lines.append(f"  {run.broker} FAILED: {run.error}")
        if run.errors:
            lines.append(
                f"  {run.broker} error responses: " + ", ".join(f"{k}={v}" for k, v in run.errors.items())
            )
    keys: list[tuple[str, str]] = []
    units: dict[tuple[str, str], str] = {}
    comparable: dict[tuple[str, str], bool] = {}
    for run in runs:
        for m in run.metrics:
            if m.key not in units:
                keys.append(m.key)
                units[m.key] = m.unit
                comparable[m.key] = m.compare
    header = ["phase", "metric", *(r.broker for r in runs)]
    if len(runs) == 2:
        header.append(f"{runs[0].broker}/{runs[1].broker}")
    rows = [header]
    for key in keys:
        unit = units[key]
        name = f"{key[1]} ({unit})" if unit and unit != "count" else key[1]
        values = [r.value(*key) for r in runs]
        row = [key[0], name, *(_fmt(v, unit) for v in values)]
        if len(runs) == 2:
            q = ratio(values[0], values[1]) if comparable[key] else None
            row.append(f"{q:.2f}" if q is not None else "")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines.append("")
    for row in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def payload(scenario: str, params: Mapping[str, Any], runs: Sequence[RunResult]) -> dict[str, Any]:
    """The ``--json`` document."""
    out: dict[str, Any] = {
        "schema": JSON_SCHEMA_VERSION,
        "scenario": scenario,
        "params": dict(params),
        "runs": [
            {
                "broker": r.broker,
                "version": r.version,
                "bootstrap": r.bootstrap,
                "nodes": r.nodes,
                "settings": r.settings,
                "error": r.error,
                "error_responses": r.errors,
                "metrics": [asdict(m) for m in r.metrics],
            }
            for r in runs
        ],
        "ratios": [],
    }
    if len(runs) == 2:
        a, b = runs
        for m in a.metrics:
            if m.compare:
                out["ratios"].append(
                    {
                        "phase": m.phase,
                        "name": m.name,
                        "numerator": a.broker,
                        "denominator": b.broker,
                        "ratio": ratio(m.value, b.value(m.phase, m.name)),
                    }
                )
    return out
