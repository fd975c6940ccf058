"""``regroup groups --output json``: one JSON document on stdout per run (a regroup extension).

The shape is stable; fields are only ever added. Absent values are ``null`` (where the table prints
``-``). Every document has ``"version": 1`` and ``"action"`` (``list``, ``describe``, ``delete``,
``reset-offsets`` or ``delete-offsets``):

- ``list``: ``{"groups": [{"group", "protocol_type", "type", "state"}]}`` — ``type`` is ``Classic`` /
  ``Consumer`` / ... and ``state`` the group state, each ``null`` when the broker does not report it.
- ``describe`` (``"view"``: ``offsets``, ``members`` or ``state``): ``{"groups": [{"group", "state",
  "error", ...}]}`` where ``error`` is ``null`` or a message (e.g. the group does not exist) and the
  view adds:

  - offsets: ``"partitions": [{"topic", "partition", "leader_epoch", "current_offset",
    "log_end_offset", "lag", "consumer_id", "host", "client_id"}]``
  - members: ``"members": [{"consumer_id", "group_instance_id", "host", "client_id", "partitions",
    "current_epoch", "assignment", "target_epoch", "target_assignment"}]``; assignments are
    ``[{"topic", "partitions": [int]}]``
  - state: ``"coordinator": {"id", "host", "port"}, "assignment_strategy", "members",
    "group_epoch", "target_assignment_epoch"``
- ``reset-offsets``: ``{"executed": bool, "groups": [{"group", "error", "partitions": [{"topic",
  "partition", "new_offset"}]}]}``
- ``delete``: ``{"deleted": [group], "failed": [{"group", "error"}]}``
- ``delete-offsets``: ``{"group", "error", "partitions": [{"topic", "partition", "error"}]}`` —
  ``error`` ``null`` means success; ``partition`` is ``null`` for a topic that does not exist.

Warnings that Kafka's tool prints (clamped offsets, empty partitions) still go to stderr.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from regroup.client.types import TopicPartition

__all__ = ["assignment_json", "document", "dumps"]

VERSION = 1


def document(action: str, **fields: Any) -> dict[str, Any]:
    return {"version": VERSION, "action": action, **fields}


def assignment_json(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(grouped.items())]


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
