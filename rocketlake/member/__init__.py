"""``rocketlake member``: a process that is a consumer group's member to its brokers (heartbeats, the requests a
broker or ``mqadmin`` sends it, its metrics) while Dagster runs land its windows."""
