"""The web console (`mqconsole`): the cluster, topics, consumer groups with their lag,
messages, lag statuses and failover runs in one place, asked through the admin API only
(mqclient.admin) and read from the lag analytics' and mqchaos's directories."""
