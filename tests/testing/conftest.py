"""The ``regroup`` pytest plugin's fixtures (also when the package's entry point is not installed), and
kafka-python loaded once with its own DeprecationWarnings silenced: the suite turns warnings into errors,
and kafka-python 3.0 reads its protocol schemas with the deprecated ``importlib.resources`` functions."""

from __future__ import annotations

import importlib
import pkgutil
import warnings

from regroup.testing.pytest_plugin import regroup_broker, regroup_broker_factory

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.protocol

    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        importlib.import_module(module.name)
    del kafka

__all__ = ["regroup_broker", "regroup_broker_factory"]
