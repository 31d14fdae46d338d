"""HA: master -> slave replication of the commitlog over an offset-pull channel (SPEC §5)."""
