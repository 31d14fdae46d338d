"""Settings for every test process and the processes they start."""

from __future__ import annotations

import os

from mqclient.cli.local_cluster import NAMESRV_PORT_ENV

# Clusters started by tests (`mqcluster up`, the demo, mqchaos, benchmarks) take any free port
# for their name server: 9876, which `mqcluster up` prefers for a person, stays free for the
# person, and tests running side by side do not contend for it. The test of that preference
# unsets it for its own processes.
os.environ[NAMESRV_PORT_ENV] = "0"
