"""Dagster resources and the clients behind them: Spark, the jar cache, the local runtime, RocketMQ."""
