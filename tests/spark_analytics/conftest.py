"""One local SparkSession for the whole test session (local[2], 2 shuffle partitions), and
skips with the reason printed when Java or pyspark is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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


@pytest.fixture(scope="session")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scenario.py's snapshots written as the collector writes them (DIR/snapshots/...)."""
    from tests.spark_analytics.scenario import scenario_rows
    from tests.spark_analytics.snapshots import write_snapshots

    return write_snapshots(tmp_path_factory.mktemp("scenario") / "in", scenario_rows())


@pytest.fixture(scope="session")
def outputs(spark: SparkSession, scenario_dir: Path) -> Path:
    """The lag job's outputs for scenario.py, computed once in the shared session."""
    from spark_analytics.constants import OUTPUT_TABLES
    from spark_analytics.lag import run_lag_job
    from tests.spark_analytics.scenario import WINDOW

    out = scenario_dir.parent / "out"
    seconds = run_lag_job(spark, str(scenario_dir), str(out), WINDOW)
    assert set(seconds) == set(OUTPUT_TABLES)
    return out
