"""Replica placement: which nodes hold each partition of a topic the controller creates or grows.

Kafka's rack-unaware round robin (``AdminUtils.assignReplicasToBrokersRackUnaware``): over the node ids in
ascending order, partition ``p``'s first replica (its preferred leader) is node ``(p + start) % n``; the
other replicas follow it at distances ``1 + (shift + j) % (n - 1)`` for ``j = 0 .. rf - 2``, and ``shift``
grows by one each time ``p`` wraps around the ``n`` nodes, so consecutive rounds pair different followers
with each leader. Leaders and replicas are spread evenly: after every full round each node leads one more
partition and holds ``rf`` more replicas.

Pure: the caller draws the random ``start`` and ``shift`` (Kafka draws both from ``[0, n)``) and passes the
running nodes; nothing here reads a clock or a random source.
"""

from __future__ import annotations

from collections.abc import Sequence

from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = ["assign_added_partitions", "assign_replicas"]

Assignment = tuple[tuple[int, ...], ...]
"""Per partition, its replicas in preference order (as ``TopicRecord.replicas``)."""


def assign_replicas(
    partitions: int,
    replication_factor: int,
    nodes: Sequence[int],
    start_index: int,
    shift: int,
    *,
    first_partition: int = 0,
) -> Assignment:
    """The replicas of partitions ``first_partition .. first_partition + partitions - 1``.

    ``nodes`` are the running nodes (order and duplicates do not matter: Kafka sorts broker ids).
    ``start_index`` and ``shift`` are the injected randomness, any integers ≥ 0. Raises ``KafkaError``
    INVALID_PARTITIONS when ``partitions`` < 1 and INVALID_REPLICATION_FACTOR when ``replication_factor``
    is below 1 or above the number of nodes, with Kafka's messages, checked in Kafka's order
    (``AdminUtils.assignReplicasToBrokers``).
    """
    if partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    brokers = sorted(set(nodes))
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    if start_index < 0 or shift < 0 or first_partition < 0:
        raise ValueError("start_index, shift and first_partition must not be negative")
    assignment: list[tuple[int, ...]] = []
    # The shift grows at every partition id that is a multiple of n after the first one placed, as Kafka's
    # loop does: a call with first_partition > 0 starts from the given shift, not from where a whole-topic
    # placement would have got to.
    next_shift = shift
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            next_shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (next_shift + j) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return tuple(assignment)


def assign_added_partitions(
    topic: str, existing: Sequence[Sequence[int]], total: int, nodes: Sequence[int]
) -> Assignment:
    """The replicas of the partitions that grow ``topic`` from ``len(existing)`` partitions to ``total``
    (CreatePartitions).

    Deterministic, as ZooKeeper-era Kafka did it (``AdminZkClient.createNewPartitionsAssignment``): the same
    replication factor as partition 0, the start index where partition 0's first replica stands among the
    sorted nodes (the first node id not below it), that index as the shift too, and partition ids continuing
    from ``len(existing)``. Errors as KRaft's controller words them (``ReplicationControlManager
    .createPartitions``): INVALID_PARTITIONS when ``total`` is not an increase, and the placement errors of
    :func:`assign_replicas`.
    """
    current = len(existing)
    if current == 0:
        raise ValueError(f"topic {topic!r} has no partitions to grow from")
    if total < current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {topic} currently has {current} partition(s); {total} would not be an increase.",
        )
    if total == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    brokers = sorted(set(nodes))
    first_leader = existing[0][0]
    start = next((i for i, node in enumerate(brokers) if node >= first_leader), 0)
    return assign_replicas(total - current, len(existing[0]), brokers, start, start, first_partition=current)
