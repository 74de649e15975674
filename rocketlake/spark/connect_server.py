"""The driver program of rocketlake's Spark Connect server: a Spark application that starts Spark Connect's service
on its SparkSession, submitted by ``spark-submit`` (``spark.session.connect_server_command``) in place of Spark's
own ``SparkConnectServer`` class, and as that class does: the service starts once the session exists (a client that
came earlier would find no session to serve it).

Spark's class forces artifact isolation on every session: each session then gets class loaders of its own, so the
classes Spark generates for its queries are compiled again and Spark's own classes loaded again from the jars in
every run's session, and Python workers of its own (their environment names the session), which import PySpark,
pyarrow and the reader again. The runs rocketlake opens on its server all run rocketlake's code, and add no jars or
classes of their own: sharing them is what a long-lived server is for. So this driver starts the same server with
isolation off (``spark.sql.artifact.isolation.enabled=false``, set on the command line too).

It exits when asked (SIGTERM, SIGINT) and with the JVM that ``spark-submit`` started, its parent: a supervisor stops
the server by the JVM's pid, and nothing of the server may outlive it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent exits


def die_with_parent() -> None:
    """Have the kernel kill this process the moment its parent (the JVM) exits; on a system without ``prctl`` the
    main loop notices within a second."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main() -> None:
    from pyspark.sql import SparkSession

    die_with_parent()
    parent = os.getppid()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    spark = SparkSession.builder.getOrCreate()
    service = spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService  # no Python API starts it
    service.start(spark.sparkContext._jsc.sc())
    print("rocketlake: Spark Connect server started", flush=True)
    while not stop.wait(1.0):
        if os.getppid() != parent:
            return  # the JVM is gone: nothing is left to stop
    service.stop()
    spark.stop()


if __name__ == "__main__":
    main()
