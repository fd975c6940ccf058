"""Shared test helpers: a blocking Kafka wire client, broker processes, ``__consumer_offsets`` reading,
third-party client drivers, a fake ZooKeeper and the compatibility report."""
