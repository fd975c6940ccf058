"""regroup as a cluster: metadata in etcd, Kafka's replication protocol between nodes, and the group
coordinator following ``__consumer_offsets`` leadership (see docs/design/cluster.md)."""
