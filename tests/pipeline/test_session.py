"""The driver JVM that ``build_session`` starts: Java options for a process that runs one job."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from regroup_pipeline.session import ONE_SHOT_JAVA_OPTIONS

_SESSION = """
import json, sys
from regroup_pipeline.session import build_session
spark = build_session(
    "local[1]", kafka=False, log_level="ERROR", one_shot=sys.argv[1] == "1",
    conf={"spark.driver.extraJavaOptions": sys.argv[2]},
)
jvm = spark.sparkContext._jvm
management = jvm.java.lang.management.ManagementFactory
diagnostic = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
hotspot = management.getPlatformMXBean(diagnostic)
print(json.dumps({
    "arguments": list(management.getRuntimeMXBean().getInputArguments()),
    "level": hotspot.getVMOption("TieredStopAtLevel").getValue(),
    "code_cache": hotspot.getVMOption("ReservedCodeCacheSize").getValue(),
}))
"""


def _driver(one_shot: bool, options: str) -> dict[str, object]:
    env = {**os.environ, "REGROUP_JVM_ARCHIVE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _SESSION, "1" if one_shot else "0", options],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("one_shot", "options", "level"),
    [
        (True, "-Dgiven=1", "1"),
        # The user's own choice comes after and wins.
        (True, "-XX:TieredStopAtLevel=4", "4"),
        (False, "-Dgiven=1", "4"),
    ],
)
def test_a_one_shot_local_driver_compiles_with_c1_only(one_shot: bool, options: str, level: str) -> None:
    driver = _driver(one_shot, options)
    arguments = driver["arguments"]
    assert isinstance(arguments, list)
    assert driver["level"] == level
    if one_shot:
        ours = ONE_SHOT_JAVA_OPTIONS.split()
        assert all(option in arguments for option in ours)
        assert arguments.index(ours[-1]) < arguments.index(options)
        assert driver["code_cache"] == str(240 * 2**20)
    else:
        assert "-XX:TieredStopAtLevel=1" not in arguments
