"""A stream's driver in a process of its own, for the tests that kill it: ``python -m
tests.integration.stream_driver NAMESRV TOPIC GROUP TABLE CHECKPOINT MOST`` runs one ``Trigger.AvailableNow`` query
of the ``rocketmq`` source into Delta to its end, then prints ``done``."""

from __future__ import annotations

import sys

from rocketlake.spark.session import spark_session
from rocketlake.spark.source import register


def available_now_query(spark, namesrv: str, topic: str, group: str, table: str, checkpoint: str, most, **limits):
    """The ``rocketmq`` stream of ``topic`` into Delta at ``table``, ``Trigger.AvailableNow``, at most ``most`` offsets
    a micro-batch (None: no such cap) and the read ``limits`` given (``maxBytesPerTrigger="8k"``), started."""
    register(spark)
    limits = {**limits, **({"maxOffsetsPerTrigger": most} if most is not None else {})}
    return (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("consumerGroup", group)
        .options(**{k: str(v) for k, v in limits.items()})
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(table)
    )


def main(namesrv: str, topic: str, group: str, table: str, checkpoint: str, most: str) -> None:
    spark = spark_session("local[2]", app_name="rocketlake-stream-driver")
    query = available_now_query(spark, namesrv, topic, group, table, checkpoint, most)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
