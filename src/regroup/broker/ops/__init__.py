"""The operator-facing admin HTTP port: Prometheus metrics, a web view of the groups and JSON endpoints.

``view`` reads the broker's state into plain values (groups, members, assignments, lag, health, rebalance
timeline), ``metrics`` turns them and the request/coordinator counters into Prometheus families at scrape
time, and ``http`` serves both with aiohttp on ``admin.listener``.
"""
