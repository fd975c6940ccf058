"""Generator of regroup.protocol codecs from Kafka's JSON message specs."""
