"""System programs that some tests need and the project does not install (``make test`` must pass
on a machine with only python3 and make: such a test skips, saying what is missing).

- ``java_missing``: why a local Spark session cannot start (no usable Java 17+), or None.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SPARK_JAVA = 17  # pyspark 4 (the `spark` extra) runs on Java 17 or later


def java_missing() -> str | None:
    """Why pyspark cannot launch its JVM here, or None when it can. pyspark's launcher
    (bin/spark-class) runs ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            return f"JAVA_HOME={home} has no bin/java"
        runner = str(java)
    else:
        runner = shutil.which("java")
        if runner is None:
            return "JAVA_HOME is not set and there is no `java` on PATH"
    try:
        proc = subprocess.run([runner, "-version"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{runner} -version failed: {e}"
    if proc.returncode != 0:
        return f"{runner} -version exited {proc.returncode}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if m:
        major = int(m.group(2)) if m.group(1) == "1" else int(m.group(1))  # "1.8.0" is Java 8
        if major < SPARK_JAVA:
            return f"{runner} is Java {major}; Spark needs Java {SPARK_JAVA} or later"
    return None
