"""One local SparkSession for the whole test session (local[2], 2 shuffle partitions), and
skips with the reason printed when Java or pyspark is missing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from spark_analytics.session import java_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TEST_SHUFFLE_PARTITIONS = 2


def require_spark() -> None:
    """Skips the test (reason printed by -ra) when Spark cannot run here."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")
    if problem := java_problem():
        pytest.skip(f"Spark cannot start: {problem}")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    require_spark()
    from pyspark.sql import SparkSession

    from spark_analytics.session import configure

    session = (SparkSession.builder.master("local[2]").appName("spark-analytics-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "WARN")
               .config("spark.sql.adaptive.coalescePartitions.initialPartitionNum", "2")
               .getOrCreate())
    configure(session, TEST_SHUFFLE_PARTITIONS)
    yield session
    session.stop()
