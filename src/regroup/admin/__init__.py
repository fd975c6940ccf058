"""Consumer-group administration for any Kafka-compatible cluster: ``regroup groups``, a drop-in for
Kafka's kafka-consumer-groups.sh, and the asyncio admin client behind it."""
