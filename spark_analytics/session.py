"""The SparkSession of the lag job: local mode by default, any master by setting, or a
Spark Connect server; and the check for Java before a local JVM is started."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_MASTER = "local[*]"
DEFAULT_LOCAL_DRIVER_MEMORY = "2g"
DEFAULT_SHUFFLE_PARTITIONS = 8
JAVA_MISSING_HINT = ("Spark needs Java 17 or newer: install a JDK (Debian: apt-get install "
                     "openjdk-17-jre-headless) or set JAVA_HOME")


def java_problem() -> str | None:
    """Why no JVM can be started here (None when `java` is found)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return None
        return f"JAVA_HOME={java_home} holds no bin/java; {JAVA_MISSING_HINT}"
    if shutil.which("java"):
        return None
    return f"java not found (JAVA_HOME is not set and no java on PATH); {JAVA_MISSING_HINT}"


def under_spark_submit() -> bool:
    """True when spark-submit started this Python process (it already runs the JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(app_name: str, master: str | None = None, remote: str | None = None,
                  shuffle_partitions: int | None = None,
                  driver_memory: str | None = None) -> SparkSession:
    """A SparkSession: Spark Connect at `remote` (sc://HOST[:PORT]), else `master` (else
    the one spark-submit chose, else local[*]). UTC session time zone; Parquet timestamps
    as microseconds; few shuffle partitions (the data is small per snapshot)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        local = master is None and not under_spark_submit()
        if local or (master or "").startswith("local"):
            # A local JVM binds its driver to loopback (Spark would pick the host's first
            # interface and warn that the hostname resolves to 127.0.0.1).
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if master or local:
            builder = builder.master(master or LOCAL_MASTER)
        if local or driver_memory:
            builder = builder.config("spark.driver.memory",
                                     driver_memory or DEFAULT_LOCAL_DRIVER_MEMORY)
        builder = (builder.config("spark.ui.showConsoleProgress", "false")
                   .config("spark.log.level", "WARN"))
    session = builder.getOrCreate()
    configure(session, shuffle_partitions)
    return session


def configure(session: SparkSession, shuffle_partitions: int | None = None) -> None:
    """The SQL settings the job relies on (also applied to a session a test shares)."""
    session.conf.set("spark.sql.session.timeZone", "UTC")
    session.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    session.conf.set("spark.sql.adaptive.enabled", "true")
    # The job's plans are wide; Spark warns when it shortens their text (log noise only).
    session.conf.set("spark.sql.debug.maxToStringFields", "500")
    if shuffle_partitions is not None or not under_spark_submit():
        session.conf.set("spark.sql.shuffle.partitions",
                         str(shuffle_partitions or DEFAULT_SHUFFLE_PARTITIONS))
