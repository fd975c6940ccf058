"""Group-coordinator benchmarks: a load generator that drives many consumer-group members from one process,
and the scenarios of ``regroup bench`` (formation, heartbeat, commit, failover, churn, static-roll)."""
