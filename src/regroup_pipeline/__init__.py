"""Consumer-group analytics on Spark for regroup and any Kafka-compatible cluster.

Reads a broker data directory (``spark.read.format("regroup")``, a PySpark Python Data Source) or a cluster
(Spark's Kafka source), decodes ``__consumer_offsets`` with vectorised Arrow functions, and computes
offsets history, lag, rebalances, expiring offsets and assignment health as Parquet tables and an HTML
report — in batch (``regroup pipeline <job>``) or as a Structured Streaming job. The broker never imports
this package; it needs the ``spark`` extra.

Entry points: :mod:`regroup_pipeline.cli` (command line), :func:`regroup_pipeline.session.build_session`,
:mod:`regroup_pipeline.inputs` (``from_datadir``, ``from_kafka``), :mod:`regroup_pipeline.jobs`,
:func:`regroup_pipeline.progress.commit_progress_to_group`, :mod:`regroup_pipeline.streaming`.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
