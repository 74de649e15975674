"""What a Spark session costs from its start to its first reads of a Python data source: with the workers' site
(``rocketlake/spark/worker_site``: PySpark imported from the installed package) and without it (from the zip Spark
puts first on its Python processes' path), alternated, each in a process of its own.

A run's own Spark pays this at every run; the Spark Connect server once. Reported per round: the CPU seconds of
the whole process tree (the driver, its JVM, the Python daemons, planners and workers; counted when each has been
waited for, so after the JVM exits), the seconds to the first read's rows, and to all ``--reads``.

    .venv/bin/python -m benchmarks.spark_start --rounds 3 --reads 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from tests.integration.test_worker_site import WHERE_FROM

#: One round, in a process of its own: the session, the reads, the JVM waited for, then what its tree used, and where
#: the data source's planner imported PySpark from (so that each variant shows it did what it says).
ROUND = (
    WHERE_FROM
    + """
import json, resource, sys, time
with_site = sys.argv[1] == "with"
import rocketlake.spark.session as session
if not with_site:
    session.put_worker_site = lambda environ: None

began = time.monotonic()
spark = session.spark_session("local[2]")
spark.dataSource.register(WhereFrom)
firsts = []
for _ in range(int(sys.argv[2])):
    (row,) = spark.read.format("where_from").load().collect()
    firsts.append(time.monotonic() - began)
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()
jvm.wait()
me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
print(json.dumps({"cpu": cpu, "first": firsts[0], "all": firsts[-1], "planner": row.planner, "worker": row.worker}))
"""
)


def one_round(variant: str, reads: int) -> dict[str, float]:
    ran = subprocess.run(
        [sys.executable, "-c", ROUND, variant, str(reads)], capture_output=True, text=True, timeout=600
    )
    if ran.returncode != 0:
        raise SystemExit(f"the {variant} round failed:\n{ran.stderr[-3000:]}")
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    zipped = {"with": False, "without": True}[variant]
    for part in ("planner", "worker"):
        if ("pyspark.zip" in got[part]) != zipped:
            raise SystemExit(f"the {variant} round's {part} imported PySpark from {got[part]}")
    return got


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args(argv)
    figures: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
    for n in range(args.rounds):
        for variant in ("without", "with"):
            got = one_round(variant, args.reads)
            figures[variant].append(got)
            print(
                f"round {n + 1}, {variant:7} the worker site: {got['cpu']:5.1f} CPU-s, first read after "
                f"{got['first']:4.1f} s, {args.reads} reads after {got['all']:4.1f} s",
                flush=True,
            )
    print("medians:")
    for variant, rounds in figures.items():
        cpu, first = (statistics.median(r[k] for r in rounds) for k in ("cpu", "first"))
        print(f"  {variant:7} the worker site: {cpu:5.1f} CPU-s, first read after {first:4.1f} s")


if __name__ == "__main__":
    main()
