"""regroup: a Kafka-compatible broker whose heart is a faithful consumer-group coordinator."""

__version__ = "0.1.0"
