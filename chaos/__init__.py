"""mqchaos: a failover checker in the manner of OpenMessaging Chaos and Jepsen's queue
checkers. A workload (workload.py) writes a history (history.py) while a nemesis
(nemesis.py) starts and heals faults through an injector (faults.py: local_faults.py by
signals to mqcluster's PIDs, docker_faults.py through the Docker API); checkers
(checker.py) are pure functions from the history to a result; runner.py ties a run
together, report.py writes its summary and chart, cli.py is the `mqchaos` command."""
