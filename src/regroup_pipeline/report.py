"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, no external URLs) with a
summary row per group (state, protocol, lag and its trend, stuck partitions, retention risk), lag over
time per group, a rebalance timeline, assignment problems, stuck partitions, partitions at risk of
retention deleting unread records, and the offsets about to expire.

Spark only aggregates; the small results are collected and drawn here in plain Python.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from regroup_pipeline.inputs import TimeWindow
from regroup_pipeline.jobs import Tables

__all__ = [
    "ReportData",
    "collect_report_data",
    "collect_report_data_from_files",
    "parquet_bytes",
    "read_table",
    "render_html",
    "write_report",
    "write_report_from_tables",
]

_PALETTE: Final = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d")
_MAX_ROWS: Final = 300


@dataclass
class ReportData:
    generated_ms: int
    window: TimeWindow
    lag_series: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)  # t, lag, time lag
    current_lag: list[dict[str, Any]] = field(default_factory=list)
    group_states: dict[str, str] = field(default_factory=dict)
    rebalances: list[dict[str, Any]] = field(default_factory=list)
    frequency: list[dict[str, Any]] = field(default_factory=list)
    unhealthy: list[dict[str, Any]] = field(default_factory=list)
    expiring: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)
    at_risk: list[dict[str, Any]] = field(default_factory=list)


def _ms(col: str) -> Any:
    return F.unix_millis(F.col(col))


def _rows(df: DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    if limit is not None:
        df = df.limit(limit)
    return [r.asDict(recursive=True) for r in df.collect()]


def collect_report_data(tables: Tables, window: TimeWindow) -> ReportData:
    """The aggregates the report draws, collected from the tables."""
    data = ReportData(generated_ms=window.now_ms, window=window)
    series = (
        tables.lag.groupBy("group", "sample_time")
        .agg(F.sum("lag").alias("lag"), F.max("time_lag_ms").alias("time_lag_ms"))
        .select("group", _ms("sample_time").alias("t"), "lag", "time_lag_ms")
        .orderBy("group", "t")
    )
    for point in series.collect():
        data.lag_series.setdefault(point["group"], []).append(
            (point["t"], point["lag"] or 0, point["time_lag_ms"] or 0)
        )
    current = tables.lag.where(F.col("is_current")).select(
        "group",
        "topic",
        "partition",
        "committed_offset",
        "log_end_offset",
        "lag",
        "time_lag_ms",
        "group_state",
    )
    data.current_lag = _rows(
        current.orderBy(F.col("lag").desc_nulls_last(), "group", "topic", "partition"), _MAX_ROWS
    )
    for r in data.current_lag:
        data.group_states[r["group"]] = r["group_state"] or "Empty"
    data.rebalances = _rows(
        tables.rebalances.select(
            "group",
            "generation",
            _ms("time").alias("t"),
            "member_count",
            F.size("joined").alias("joined"),
            F.size("left").alias("left"),
            "state",
            "protocol",
            "since_previous_ms",
            "leader",
        ).orderBy("group", "t")
    )
    for r in data.rebalances:
        data.group_states.setdefault(r["group"], r["state"])
    data.frequency = _rows(
        tables.rebalance_frequency.select(
            "group",
            "current_state",
            "generations",
            "empty_generations",
            "rebalances_per_hour",
            "median_interval_ms",
            "max_members",
            _ms("last_rebalance").alias("last_rebalance"),
        ).orderBy(F.col("generations").desc(), "group")
    )
    data.unhealthy = _rows(
        tables.assignment_health.where(~F.col("healthy"))
        .select(
            "group",
            "generation",
            _ms("time").alias("t"),
            "protocol",
            F.size("unassigned").alias("unassigned"),
            F.size("multiply_assigned").alias("multiply_assigned"),
            F.size("unexpected").alias("unexpected"),
        )
        .orderBy("group", "generation"),
        _MAX_ROWS,
    )
    data.expiring = _rows(
        tables.expiring_offsets.select(
            "group",
            "topic",
            "partition",
            "rule",
            "group_state",
            _ms("expires_at").alias("expires_at"),
            "expires_in_ms",
            "group_deleted",
        ).orderBy("expires_at", "group", "topic", "partition"),
        _MAX_ROWS,
    )
    data.summary = _rows(
        tables.group_summary.select(
            "group",
            "state",
            "protocol",
            "members",
            "partitions",
            "lag",
            "max_time_lag_ms",
            "lag_trend",
            "trend",
            "catch_up_ms",
            "stuck_partitions",
            "at_risk_partitions",
            "records_lost",
            _ms("data_loss_at").alias("data_loss_at"),
        ).orderBy(F.col("lag").desc_nulls_last(), "group"),
        _MAX_ROWS,
    )
    data.stuck = _rows(
        tables.stuck_partitions.select(
            "group",
            "topic",
            "partition",
            "owner_member_id",
            "owner_client_id",
            "owner_client_host",
            "committed_offset",
            "unchanged_ms",
            "records_since",
            "lag",
        ).orderBy(F.col("unchanged_ms").desc(), "group", "topic", "partition"),
        _MAX_ROWS,
    )
    data.at_risk = _rows(
        tables.retention_risk.where(F.col("at_risk"))
        .select(
            "group",
            "topic",
            "partition",
            "committed_offset",
            "log_start_offset",
            "records_lost",
            "retention_margin_ms",
            "data_loss_in_ms",
            "data_loss_by",
        )
        .orderBy(F.col("records_lost").desc(), F.col("data_loss_in_ms").asc_nulls_last(), "group"),
        _MAX_ROWS,
    )
    return data


# ------------------------------------------------------------------------------------------ formatting


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _time(ms: int | None) -> str:
    if ms is None:
        return "–"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def _duration(ms: float | None) -> str:
    if ms is None:
        return "–"
    sign = "−" if ms < 0 else ""
    s = abs(ms) / 1000
    if s < 1:
        return f"{sign}{abs(ms):.0f} ms"
    if s < 120:
        return f"{sign}{s:.1f} s"
    if s < 7200:
        return f"{sign}{s / 60:.1f} min"
    if s < 172800:
        return f"{sign}{s / 3600:.1f} h"
    return f"{sign}{s / 86400:.1f} d"


def _count(n: float) -> str:
    if abs(n) >= 1e9:
        return f"{n / 1e9:.1f}G"
    if abs(n) >= 1e6:
        return f"{n / 1e6:.1f}M"
    if abs(n) >= 1e4:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def _color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


# ------------------------------------------------------------------------------------------ charts


def _el(name: str, text: str | None = None, /, **attrs: object) -> str:
    """An SVG element; attribute names use ``_`` for ``-``; ``text`` is escaped."""
    rendered = " ".join(
        f'{k.rstrip("_").replace("_", "-")}="{_esc(f"{v:.1f}" if isinstance(v, float) else v)}"'
        for k, v in attrs.items()
    )
    if text is None:
        return f"<{name} {rendered}/>"
    return f"<{name} {rendered}>{_esc(text)}</{name}>"


def _svg(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
        f"<title>{_esc(title)}</title>",
    ]


def _line_chart(
    points: Sequence[tuple[int, float]],
    *,
    t0: int,
    t1: int,
    color: str,
    label: str,
    fmt: Any,
    width: int = 520,
    height: int = 150,
) -> str:
    left, right, top, bottom = 56, 10, 18, 24
    w, h = width - left - right, height - top - bottom
    ymax = max((v for _, v in points), default=0) or 1
    span = max(t1 - t0, 1)

    def x(t: int) -> float:
        return left + (t - t0) / span * w

    def y(v: float) -> float:
        return top + h - v / ymax * h

    parts = _svg(width, height, label)
    for frac in (0, 0.5, 1):
        yy = y(ymax * frac)
        parts.append(_el("line", x1=left, x2=left + w, y1=yy, y2=yy, class_="grid"))
        parts.append(_el("text", fmt(ymax * frac), x=left - 6, y=yy + 4, class_="axis", text_anchor="end"))
    for frac, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        t = int(t0 + span * frac)
        parts.append(_el("text", _short_time(t), x=x(t), y=height - 6, class_="axis", text_anchor=anchor))
    parts.append(_el("text", label, x=left, y=12, class_="label"))
    if points:
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        area = f"{x(points[0][0]):.1f},{y(0):.1f} {coords} {x(points[-1][0]):.1f},{y(0):.1f}"
        parts.append(_el("polygon", points=area, fill=color, fill_opacity="0.12"))
        parts.append(_el("polyline", points=coords, fill="none", stroke=color, stroke_width="1.8"))
        t, v = points[-1]
        tip = f"<title>{_esc(fmt(v))} at {_esc(_time(t))}</title>"
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">{tip}</circle>')
    parts.append("</svg>")
    return "".join(parts)


def _tip(group: str, r: dict[str, Any], bad: bool) -> str:
    return (
        f"{group} generation {r['generation']} at {_time(r['t'])}\n"
        f"{r['state']}, {r['member_count']} member(s), protocol {r['protocol'] or '–'}\n"
        f"+{r['joined']} joined, −{r['left']} left, {_duration(r['since_previous_ms'])} after the previous"
        + ("\nassignment problems" if bad else "")
    )


def _timeline(rebalances: Sequence[dict[str, Any]], unhealthy: Iterable[tuple[str, int]], t_end: int) -> str:
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rebalances:
        by_group[r["group"]].append(r)
    if not by_group:
        return '<p class="muted">No generations recorded.</p>'
    bad = set(unhealthy)
    groups = sorted(by_group)
    t0 = min(r["t"] for r in rebalances)
    t1 = max(*(r["t"] for r in rebalances), t_end)
    span = max(t1 - t0, 1)
    label_w, right, row_h, top = 170, 16, 30, 10
    width = 1080
    w = width - label_w - right
    height = top + row_h * len(groups) + 26
    parts = _svg(width, height, "Rebalance timeline")

    def x(t: int) -> float:
        return float(label_w + (t - t0) / span * w)

    for i, group in enumerate(groups):
        yy = top + i * row_h + row_h / 2
        parts.append(_el("text", group, x=label_w - 8, y=yy + 4, class_="axis", text_anchor="end"))
        parts.append(_el("line", x1=label_w, x2=label_w + w, y1=yy, y2=yy, class_="lane"))
        gens = by_group[group]
        # A band while the group is Stable, from each generation to the next (or to now).
        ends = [g["t"] for g in gens[1:]] + [t_end]
        for g, end in zip(gens, ends, strict=True):
            if g["state"] == "Stable":
                parts.append(
                    _el("line", x1=x(g["t"]), x2=x(end), y1=yy, y2=yy, stroke=_color(i), stroke_width="4",
                        stroke_opacity="0.35")
                )  # fmt: skip
        for r in gens:
            flagged = (group, r["generation"]) in bad
            fill = _color(i) if r["state"] == "Stable" else "#9ca3af"
            ring = 'stroke="#dc2626" stroke-width="2.5"' if flagged else 'stroke="#fff" stroke-width="1"'
            parts.append(
                f'<circle cx="{x(r["t"]):.1f}" cy="{yy:.1f}" r="{4 + min(r["member_count"], 8)}" '
                f'fill="{fill}" '
                f'fill-opacity="0.85" {ring}><title>{_esc(_tip(group, r, flagged))}</title></circle>'
            )
    base = top + row_h * len(groups) + 16
    for frac, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        t = int(t0 + span * frac)
        parts.append(_el("text", _time(t), x=label_w + w * frac, y=base, class_="axis", text_anchor=anchor))
    parts.append("</svg>")
    return "".join(parts)


# ------------------------------------------------------------------------------------------ page

_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#111827}
body{background:#f9fafb}
header{background:#111827;color:#f9fafb;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#9ca3af}main{padding:18px 28px;max-width:1180px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:16px;margin:0 0 10px}.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:18px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:10px 16px;min-width:130px}
.card b{display:block;font-size:22px}.card span{color:#6b7280;font-size:12px}
.group{border-top:1px solid #f3f4f6;padding-top:8px;margin-top:8px}.group h3{margin:0 0 4px;font-size:14px}
.charts{display:flex;gap:12px;flex-wrap:wrap}svg.chart{background:#fff}
.grid{stroke:#e5e7eb}.lane{stroke:#e5e7eb;stroke-dasharray:3 3}.axis{font-size:10px;fill:#6b7280}
.label{font-size:11px;fill:#374151;font-weight:600}table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #f3f4f6}th{color:#6b7280;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#6b7280}
.state{display:inline-block;border-radius:9px;padding:0 7px;font-size:11px;background:#e5e7eb}
.state.Stable{background:#d1fae5;color:#065f46}.state.Empty{background:#fef3c7;color:#92400e}
.state.Dead{background:#fee2e2;color:#991b1b}.bar{height:8px;border-radius:4px;background:#f59e0b}
.bar.overdue{background:#dc2626}.legend span{margin-right:14px}
.up{color:#dc2626}.down{color:#059669}.flat{color:#6b7280}.risk{color:#dc2626;font-weight:600}
"""


def _state(state: str | None) -> str:
    s = state or "Empty"
    return f'<span class="state {_esc(s)}">{_esc(s)}</span>'


_ARROWS: Final = {"growing": ("↑", "up"), "shrinking": ("↓", "down"), "flat": ("→", "flat")}


def _rate(per_second: float) -> str:
    """Records per second, minute or hour, whichever reads best."""
    if abs(per_second) >= 1:
        return f"{per_second:+.1f}/s"
    if abs(per_second) * 60 >= 1:
        return f"{per_second * 60:+.1f}/min"
    return f"{per_second * 3600:+.1f}/h"


def _trend(trend: str | None, rate: float | None) -> str:
    if trend is None:
        return '<span class="muted">–</span>'
    arrow, css = _ARROWS[trend]
    change = "" if rate is None else f" {_rate(rate)}"
    return f'<span class="{css}" title="lag {_esc(trend)}">{arrow}{_esc(change)}</span>'


def _risk(r: dict[str, Any]) -> str:
    if r["records_lost"]:
        return f'<span class="risk">{_count(r["records_lost"])} records lost</span>'
    if r["data_loss_at"] is not None:
        return f"data loss {_esc(_time(r['data_loss_at']))}"
    return '<span class="muted">–</span>'


def _summary_section(data: ReportData) -> str:
    out = ["<section><h2>Groups</h2>"]
    if not data.summary:
        out.append('<p class="muted">No groups.</p></section>')
        return "".join(out)
    out.append(
        "<table><tr><th>group</th><th>state</th><th>protocol</th><th>members</th><th>lag</th>"
        "<th>time lag</th><th>trend</th><th>catch-up</th><th>stuck</th><th>retention risk</th></tr>"
    )
    for r in data.summary:
        state = _state(r["state"]) if r["state"] is not None else '<span class="muted">–</span>'
        stuck = r["stuck_partitions"]
        out.append(
            f"<tr><td>{_esc(r['group'])}</td><td>{state}</td><td>{_esc(r['protocol'])}</td>"
            f"<td class=num>{r['members']}</td>"
            f"<td class=num>{'–' if r['lag'] is None else _count(r['lag'])}</td>"
            f"<td class=num>{_duration(r['max_time_lag_ms'])}</td>"
            f"<td>{_trend(r['trend'], r['lag_trend'])}</td>"
            f"<td class=num>{_duration(r['catch_up_ms'])}</td>"
            f"<td class=num>{f'<span class=risk>{stuck}</span>' if stuck else 0}</td>"
            f"<td>{_risk(r)}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def _stuck_section(data: ReportData) -> str:
    out = ["<section><h2>Stuck partitions</h2>"]
    if not data.stuck:
        out.append('<p class="muted">No committed offset is stuck while records arrive.</p></section>')
        return "".join(out)
    out.append(
        "<table><tr><th>group</th><th>partition</th><th>owner</th><th>committed</th><th>unchanged for</th>"
        "<th>records since</th><th>lag</th></tr>"
    )
    for r in data.stuck:
        owner = r["owner_member_id"]
        who = "–" if owner is None else f"{owner} ({r['owner_client_id']}, {r['owner_client_host']})"
        out.append(
            f"<tr><td>{_esc(r['group'])}</td><td>{_esc(r['topic'])}-{r['partition']}</td>"
            f"<td>{_esc(who)}</td><td class=num>{r['committed_offset']}</td>"
            f"<td class=num>{_duration(r['unchanged_ms'])}</td><td class=num>{r['records_since']}</td>"
            f"<td class=num>{r['lag']}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def _retention_section(data: ReportData) -> str:
    out = ["<section><h2>Retention risk</h2>"]
    if not data.at_risk:
        out.append('<p class="muted">Retention is not expected to delete unread records.</p></section>')
        return "".join(out)
    out.append(
        "<table><tr><th>group</th><th>partition</th><th>committed</th><th>log start</th>"
        "<th>records lost</th><th>margin</th><th>data loss in</th><th>by</th></tr>"
    )
    for r in data.at_risk:
        left = r["data_loss_in_ms"]
        when = "–" if left is None else ("due" if left <= 0 else _duration(left))
        lost = r["records_lost"]
        out.append(
            f"<tr><td>{_esc(r['group'])}</td><td>{_esc(r['topic'])}-{r['partition']}</td>"
            f"<td class=num>{r['committed_offset']}</td>"
            f"<td class=num>{'–' if r['log_start_offset'] is None else r['log_start_offset']}</td>"
            f"<td class=num>{f'<span class=risk>{lost}</span>' if lost else 0}</td>"
            f"<td class=num>{_duration(r['retention_margin_ms'])}</td><td class=num>{when}</td>"
            f"<td>{_esc(r['data_loss_by'] or '')}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def _lag_section(data: ReportData) -> str:
    if not data.lag_series:
        return '<section><h2>Lag over time</h2><p class="muted">No committed offsets.</p></section>'
    all_t = [t for pts in data.lag_series.values() for t, _, _ in pts]
    t0, t1 = min(all_t), max(all_t)
    out = [
        '<section><h2>Lag over time</h2><p class="muted">Sum of record lag over the group\'s partitions, '
        "and the largest time lag (time since the first unconsumed record was written).</p>"
    ]
    for i, (group, pts) in enumerate(sorted(data.lag_series.items())):
        last = pts[-1]
        out.append(
            f'<div class="group"><h3>{_esc(group)} {_state(data.group_states.get(group))} '
            f'<span class="muted">now: {_count(last[1])} records behind, {_duration(last[2])}</span></h3>'
            '<div class="charts">'
        )
        out.append(
            _line_chart(
                [(t, lag) for t, lag, _ in pts],
                t0=t0,
                t1=t1,
                color=_color(i),
                label="lag (records)",
                fmt=_count,
            )
        )
        out.append(
            _line_chart(
                [(t, tl) for t, _, tl in pts], t0=t0, t1=t1, color="#ea580c", label="time lag", fmt=_duration
            )
        )
        out.append("</div></div>")
    out.append("</section>")
    return "".join(out)


def _rebalance_section(data: ReportData) -> str:
    bad = [(r["group"], r["generation"]) for r in data.unhealthy]
    out = [
        "<section><h2>Rebalances</h2>",
        '<p class="legend muted"><span>● coloured: Stable generation (size = members)</span>'
        "<span>● grey: Empty</span><span>red ring: assignment problems</span>"
        "<span>hover a marker for details</span></p>",
        _timeline(data.rebalances, bad, data.window.as_of_ms),
    ]
    if data.frequency:
        out.append(
            "<table><tr><th>group</th><th>state</th><th>generations</th><th>empty</th><th>per hour</th>"
            "<th>median interval</th><th>max members</th><th>last rebalance</th></tr>"
        )
        for r in data.frequency:
            per_hour = r["rebalances_per_hour"]
            out.append(
                f"<tr><td>{_esc(r['group'])}</td><td>{_state(r['current_state'])}</td>"
                f"<td class=num>{r['generations']}</td><td class=num>{r['empty_generations']}</td>"
                f"<td class=num>{'–' if per_hour is None else f'{per_hour:.1f}'}</td>"
                f"<td class=num>{_duration(r['median_interval_ms'])}</td>"
                f"<td class=num>{r['max_members']}</td>"
                f"<td>{_time(r['last_rebalance'])}</td></tr>"
            )
        out.append("</table>")
    if data.unhealthy:
        out.append(
            "<h2>Assignment problems</h2><table><tr><th>group</th><th>generation</th><th>time</th>"
            "<th>protocol</th><th>unassigned</th><th>assigned twice</th><th>unexpected</th></tr>"
        )
        for r in data.unhealthy:
            out.append(
                f"<tr><td>{_esc(r['group'])}</td><td class=num>{r['generation']}</td><td>{_time(r['t'])}</td>"
                f"<td>{_esc(r['protocol'])}</td><td class=num>{r['unassigned']}</td>"
                f"<td class=num>{r['multiply_assigned']}</td><td class=num>{r['unexpected']}</td></tr>"
            )
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _expiring_section(data: ReportData, horizon_hint: int) -> str:
    out = ["<section><h2>Offsets about to expire</h2>"]
    if not data.expiring:
        out.append('<p class="muted">No committed offset expires within the horizon.</p></section>')
        return "".join(out)
    scale = max(*((r["expires_in_ms"] or 0) for r in data.expiring), horizon_hint, 1)
    out.append(
        "<table><tr><th>group</th><th>partition</th><th>state</th><th>rule</th><th>expires</th>"
        "<th>in</th><th style='width:180px'></th><th>group goes too</th></tr>"
    )
    for r in data.expiring:
        left = r["expires_in_ms"] or 0
        overdue = left <= 0
        pct = 100 if overdue else max(2.0, 100 * (1 - left / scale))
        out.append(
            f"<tr><td>{_esc(r['group'])}</td><td>{_esc(r['topic'])}-{r['partition']}</td>"
            f"<td>{_state(r['group_state'])}</td><td>{_esc(r['rule'])}</td><td>{_time(r['expires_at'])}</td>"
            f"<td class=num>{'overdue' if overdue else _duration(left)}</td>"
            f"<td><div class='bar{' overdue' if overdue else ''}' style='width:{pct:.0f}%'></div></td>"
            f"<td>{'yes' if r['group_deleted'] else ''}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def _current_lag_section(data: ReportData) -> str:
    out = ["<section><h2>Current lag by partition</h2>"]
    if not data.current_lag:
        out.append('<p class="muted">No committed offsets.</p></section>')
        return "".join(out)
    out.append(
        "<table><tr><th>group</th><th>state</th><th>partition</th><th>committed</th><th>log end</th>"
        "<th>lag</th><th>time lag</th></tr>"
    )
    for r in data.current_lag:
        out.append(
            f"<tr><td>{_esc(r['group'])}</td><td>{_state(r['group_state'])}</td>"
            f"<td>{_esc(r['topic'])}-{r['partition']}</td><td class=num>{r['committed_offset']}</td>"
            f"<td class=num>{'–' if r['log_end_offset'] is None else r['log_end_offset']}</td>"
            f"<td class=num>{'–' if r['lag'] is None else r['lag']}</td>"
            f"<td class=num>{_duration(r['time_lag_ms'])}</td></tr>"
        )
    out.append("</table></section>")
    return "".join(out)


def render_html(data: ReportData, *, horizon_ms: int = 24 * 3600 * 1000) -> str:
    """The report page for ``data``."""
    groups = sorted(set(data.lag_series) | {r["group"] for r in data.rebalances})
    empty = sum(1 for g in groups if data.group_states.get(g) == "Empty")
    total_lag = sum(r["lag"] or 0 for r in data.current_lag)
    window = data.window
    span = (
        f"{_time(window.since_ms) if window.since_ms is not None else 'the beginning of the log'}"
        f" → {_time(window.as_of_ms)}"
    )
    cards = [
        (len(groups), "groups"),
        (empty, "Empty groups"),
        (_count(total_lag), "records behind"),
        (len(data.rebalances), "generations"),
        (len(data.unhealthy), "assignment problems"),
        (len(data.stuck), "stuck partitions"),
        (len(data.at_risk), "partitions at risk"),
        (len(data.expiring), "offsets expiring"),
    ]
    return "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            "<title>regroup — consumer groups</title><style>",
            _CSS,
            "</style></head><body><header><h1>Consumer groups</h1>",
            f"<p>{_esc(span)} · generated {_esc(_time(data.generated_ms))}</p></header><main>",
            "<div class='cards'>",
            "".join(f"<div class='card'><b>{_esc(v)}</b><span>{_esc(k)}</span></div>" for v, k in cards),
            "</div>",
            _summary_section(data),
            _lag_section(data),
            _rebalance_section(data),
            _stuck_section(data),
            _retention_section(data),
            _expiring_section(data, horizon_ms),
            _current_lag_section(data),
            "</main></body></html>\n",
        ]
    )


def write_report(
    tables: Tables, target: Path, window: TimeWindow, *, horizon_ms: int = 24 * 3600 * 1000
) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        render_html(collect_report_data(tables, window), horizon_ms=horizon_ms), encoding="utf-8"
    )


_SPARK_SCHEMA_KEY: Final = b"org.apache.spark.sql.parquet.row.metadata"


def read_table(spark: SparkSession, directory: Path, schema: StructType | None = None) -> DataFrame:
    """A Parquet table, read with ``schema``, else the schema Spark wrote in its files' metadata, else the
    one Spark infers. Given a schema, Spark runs no job to infer it."""
    if schema is None:
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

            first = min(directory.glob("part-*.parquet"))
            written = pq.read_schema(first).metadata or {}
            if _SPARK_SCHEMA_KEY in written:
                schema = StructType.fromJson(json.loads(written[_SPARK_SCHEMA_KEY]))
        except (OSError, ValueError):
            schema = None
    reader = spark.read if schema is None else spark.read.schema(schema)
    return reader.parquet(str(directory))


# Tables the report reads, and how big they may be for the driver to read them itself.
_REPORT_TABLES: Final = (
    "lag",
    "rebalances",
    "rebalance_frequency",
    "assignment_health",
    "expiring_offsets",
    "group_summary",
    "stuck_partitions",
    "retention_risk",
)
_DRIVER_READ_BYTES: Final = 256 * 2**20


def parquet_bytes(directory: Path) -> int | None:
    """Bytes of the Parquet files of the table in ``directory``; None when there is no such directory."""
    if not directory.is_dir():
        return None
    return sum(f.stat().st_size for f in directory.glob("*.parquet"))


def _table_bytes(directory: Path) -> int | None:
    """Bytes of the report's Parquet files under ``directory``; None when a table is missing."""
    total = 0
    for name in _REPORT_TABLES:
        size = parquet_bytes(directory / name)
        if size is None:
            return None
        total += size
    return total


def _sorted(rows: list[dict[str, Any]], *keys: str, limit: int | None = None) -> list[dict[str, Any]]:
    """``rows`` in Spark's order for ``keys`` (``-name``: descending, nulls last; ``name``: ascending,
    nulls first; ``name+``: ascending, nulls last)."""
    out = list(rows)
    for key in reversed(keys):
        descending, asc_nulls_last = key.startswith("-"), key.endswith("+")

        def order(row: dict[str, Any], name: str = key.strip("-+"), last: bool = asc_nulls_last) -> Any:
            value = row[name]
            # A descending sort is a reversed one: ranking non-nulls above nulls puts the nulls last.
            return (value is None) if last else (value is not None), 0 if value is None else value

        out.sort(key=order, reverse=descending)
    return out if limit is None else out[:limit]


def collect_report_data_from_files(directory: Path, window: TimeWindow) -> ReportData:
    """What :func:`collect_report_data` collects, read from the Parquet tables under ``directory`` by the
    driver with pyarrow: the same rows in the same order, without running Spark jobs."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    def read(name: str, columns: Sequence[str], times: Sequence[str] = ()) -> Any:
        return millis(pq.read_table(directory / name, columns=list(columns)), times)

    def millis(table: Any, times: Sequence[str]) -> Any:
        for c in times:  # epoch milliseconds, floored as unix_millis does (Spark writes INT96: ns)
            per_ms = {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[table.schema.field(c).type.unit]
            scale = 1000 if table.schema.field(c).type.unit == "s" else 1
            ticks = pc.cast(table.column(c), pa.int64()).to_pylist()
            millis = pa.array([None if v is None else v * scale // per_ms for v in ticks], pa.int64())
            table = table.set_column(table.schema.get_field_index(c), c, millis)
        return table

    def sizes(table: Any, *names: str) -> Any:
        for n in names:
            i = table.schema.get_field_index(n)
            table = table.set_column(i, n, pc.cast(pc.list_value_length(table.column(n)), pa.int32()))
        return table

    data = ReportData(generated_ms=window.now_ms, window=window)
    lag = read("lag", ["group", "sample_time", "lag", "time_lag_ms"])
    series = millis(
        lag.group_by(["group", "sample_time"])
        .aggregate([("lag", "sum"), ("time_lag_ms", "max")])
        .select(["group", "sample_time", "lag_sum", "time_lag_ms_max"])
        .rename_columns(["group", "t", "lag", "time_lag_ms"]),
        ["t"],
    )
    for point in _sorted(series.to_pylist(), "group", "t"):
        data.lag_series.setdefault(point["group"], []).append(
            (point["t"], point["lag"] or 0, point["time_lag_ms"] or 0)
        )
    columns = ["group", "topic", "partition", "committed_offset", "log_end_offset", "lag", "time_lag_ms"]
    current = pq.read_table(directory / "lag", columns=[*columns, "group_state", "is_current"])
    current = current.filter(pc.fill_null(current.column("is_current"), False)).drop_columns(["is_current"])
    data.current_lag = _sorted(current.to_pylist(), "-lag", "group", "topic", "partition", limit=_MAX_ROWS)
    for r in data.current_lag:
        data.group_states[r["group"]] = r["group_state"] or "Empty"
    rebalances = read(
        "rebalances",
        [
            "group",
            "generation",
            "time",
            "member_count",
            "joined",
            "left",
            "state",
            "protocol",
            "since_previous_ms",
            "leader",
        ],
        ["time"],
    ).rename_columns(
        [
            "group",
            "generation",
            "t",
            "member_count",
            "joined",
            "left",
            "state",
            "protocol",
            "since_previous_ms",
            "leader",
        ]
    )
    data.rebalances = _sorted(sizes(rebalances, "joined", "left").to_pylist(), "group", "t")
    for r in data.rebalances:
        data.group_states.setdefault(r["group"], r["state"])
    frequency = read(
        "rebalance_frequency",
        [
            "group",
            "current_state",
            "generations",
            "empty_generations",
            "rebalances_per_hour",
            "median_interval_ms",
            "max_members",
            "last_rebalance",
        ],
        ["last_rebalance"],
    )
    data.frequency = _sorted(frequency.to_pylist(), "-generations", "group")
    health = read(
        "assignment_health",
        [
            "group",
            "generation",
            "time",
            "protocol",
            "unassigned",
            "multiply_assigned",
            "unexpected",
            "healthy",
        ],
        ["time"],
    )
    health = health.filter(pc.invert(pc.fill_null(health.column("healthy"), True))).drop_columns(["healthy"])
    health = sizes(health, "unassigned", "multiply_assigned", "unexpected")
    health = health.rename_columns(
        ["group", "generation", "t", "protocol", "unassigned", "multiply_assigned", "unexpected"]
    )
    data.unhealthy = _sorted(health.to_pylist(), "group", "generation", limit=_MAX_ROWS)
    expiring = read(
        "expiring_offsets",
        [
            "group",
            "topic",
            "partition",
            "rule",
            "group_state",
            "expires_at",
            "expires_in_ms",
            "group_deleted",
        ],
        ["expires_at"],
    )
    data.expiring = _sorted(
        expiring.to_pylist(), "expires_at", "group", "topic", "partition", limit=_MAX_ROWS
    )
    summary = read(
        "group_summary",
        [
            "group",
            "state",
            "protocol",
            "members",
            "partitions",
            "lag",
            "max_time_lag_ms",
            "lag_trend",
            "trend",
            "catch_up_ms",
            "stuck_partitions",
            "at_risk_partitions",
            "records_lost",
            "data_loss_at",
        ],
        ["data_loss_at"],
    )
    data.summary = _sorted(summary.to_pylist(), "-lag", "group", limit=_MAX_ROWS)
    stuck = read(
        "stuck_partitions",
        [
            "group",
            "topic",
            "partition",
            "owner_member_id",
            "owner_client_id",
            "owner_client_host",
            "committed_offset",
            "unchanged_ms",
            "records_since",
            "lag",
        ],
    )
    data.stuck = _sorted(stuck.to_pylist(), "-unchanged_ms", "group", "topic", "partition", limit=_MAX_ROWS)
    risk = read(
        "retention_risk",
        [
            "group",
            "topic",
            "partition",
            "committed_offset",
            "log_start_offset",
            "records_lost",
            "retention_margin_ms",
            "data_loss_in_ms",
            "data_loss_by",
            "at_risk",
        ],
    )
    risk = risk.filter(pc.fill_null(risk.column("at_risk"), False)).drop_columns(["at_risk"])
    data.at_risk = _sorted(risk.to_pylist(), "-records_lost", "data_loss_in_ms+", "group", limit=_MAX_ROWS)
    return data


def write_report_from_tables(
    spark: SparkSession,
    directory: Path,
    target: Path,
    window: TimeWindow,
    *,
    horizon_ms: int = 24 * 3600 * 1000,
) -> None:
    """Render the report from Parquet tables an ``all`` run wrote to ``directory``: read by the driver
    when they are small and at hand (:func:`collect_report_data_from_files`), else through Spark."""
    size = _table_bytes(directory)
    if size is not None and size <= _DRIVER_READ_BYTES:
        target.parent.mkdir(parents=True, exist_ok=True)
        data = collect_report_data_from_files(directory, window)
        target.write_text(render_html(data, horizon_ms=horizon_ms), encoding="utf-8")
        return

    def read(name: str) -> DataFrame:
        return read_table(spark, directory / name)

    tables = Tables(
        offsets=read("offsets"),
        lag=read("lag"),
        rebalances=read("rebalances"),
        rebalance_frequency=read("rebalance_frequency"),
        expiring_offsets=read("expiring_offsets"),
        assignment_health=read("assignment_health"),
        lag_trend=read("lag_trend"),
        retention_risk=read("retention_risk"),
        stuck_partitions=read("stuck_partitions"),
        member_commits=read("member_commits"),
        group_summary=read("group_summary"),
    )
    write_report(tables, target, window, horizon_ms=horizon_ms)
