"""Cluster-wide lag and fall-behind analytics (SPEC §8): a collector of offset snapshots
(no JVM) and PySpark jobs over them."""
