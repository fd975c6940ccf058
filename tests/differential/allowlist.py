"""Differences between Apache Kafka and regroup that the differential suite accepts, each with its reason.

Every entry names the API, the versions, the field (a glob over the field path printed in failure
reports, e.g. ``coordinators[*].error_message``) and the scenarios (a glob) it covers, and may restrict the
exact values seen on each side. Anything not matched here fails the scenario. Entries are for differences
that are legitimately outside "behaves like Kafka for consumer groups" — never for coordinator bugs, which
are reported and tracked with strict xfails instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from support.normalize import Difference, glob_match

__all__ = ["ALLOWLIST", "ANY", "Allowed"]


class _Any:
    def __repr__(self) -> str:
        return "any"


ANY: Final[Any] = _Any()


@dataclass(frozen=True)
class Allowed:
    api: str
    versions: tuple[int, int]
    field: str
    scenario: str
    reason: str
    kafka: Any = ANY
    regroup: Any = ANY

    def matches(self, scenario: str, api: str, version: int, d: Difference) -> bool:
        return (
            glob_match(self.api, api)
            and self.versions[0] <= version <= self.versions[1]
            and d.matches(self.field)
            and glob_match(self.scenario, scenario)
            and (self.kafka is ANY or d.expected == self.kafka)
            and (self.regroup is ANY or d.actual == self.regroup)
        )


_KIP_896 = (
    "regroup keeps serving OffsetCommit v1, which Apache Kafka 4.0 removed (KIP-896); advertising one more "
    "old version changes nothing for clients, which negotiate the highest common version"
)
_NEWER = (
    "regroup's codecs are generated from the protocol specs of Kafka trunk as of Oct 2024, before "
    "{what}; clients negotiate the highest common version, so they speak the older version to regroup "
    "(exercised by the client matrix)"
)
ALLOWLIST: Final[tuple[Allowed, ...]] = (
    Allowed(
        "FindCoordinator",
        (4, 6),
        "coordinators[*].error_message",
        "find-coordinator-key-types",
        "free-text diagnostic: for INVALID_REQUEST (unknown/unsupported key type) Kafka leaves the per-key "
        "message empty while regroup describes the error; the error code is identical and no client "
        "interprets the text",
        kafka="",
    ),
    Allowed("ApiVersions", (0, 4), "api_keys.8[0]", "api-versions", _KIP_896, kafka=2, regroup=1),
    Allowed(
        "ApiVersions",
        (0, 4),
        "api_keys.8[1]",
        "api-versions",
        _NEWER.format(what="OffsetCommit v10 (topic ids)"),
        kafka=10,
        regroup=9,
    ),
    Allowed(
        "ApiVersions",
        (0, 4),
        "api_keys.9[1]",
        "api-versions",
        _NEWER.format(what="OffsetFetch v10 (topic ids)"),
        kafka=10,
        regroup=9,
    ),
    Allowed(
        "ApiVersions",
        (0, 4),
        "api_keys.28[1]",
        "api-versions",
        _NEWER.format(
            what="TxnOffsetCommit v5 (KIP-890 transactions v2); regroup has no transactions anyway"
        ),
        kafka=5,
        regroup=4,
    ),
)


def render_markdown() -> str:
    """The allowlist as a markdown table (for docs/compatibility.md)."""
    lines = [
        "Differences the differential suite accepts (`tests/differential/allowlist.py`). Anything else "
        "fails a scenario.",
        "",
        "| API | versions | field | scenario | Kafka | regroup | reason |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in ALLOWLIST:
        cells = [
            a.api,
            f"{a.versions[0]}-{a.versions[1]}",
            f"`{a.field}`",
            f"`{a.scenario}`",
            repr(a.kafka),
            repr(a.regroup),
            a.reason,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
