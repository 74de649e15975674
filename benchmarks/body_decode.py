"""Decoding bodies into columns, per message and per core: Protobuf in the reader, JSON and Avro in Spark's JVM.

    .venv/bin/python -m benchmarks.body_decode [--messages 20000] [--rounds 3]

The same orders (an id, quantities, an amount, a status, a shipping address, five labels, twelve lines, six counts,
a time and a 300-byte note: about 1 KiB as Protobuf) in three encodings, at equal information: each decoder gives the
same columns. Figures are CPU microseconds a message on one core, the median of the rounds after the first (warm):

* **Protobuf, columnar**: ``BodyDecoder.decode``, what the reader runs on a batch of 1,000 bodies (ptars parses the
  batch into Arrow, Arrow's functions give from_protobuf's nulls); this process's CPU time.
* **Protobuf, reference**: ``BodyDecoder.decode_each``, one message at a time (the rules written out; what serves a
  batch holding a body that does not parse).
* **JSON** (``from_json``) and **Avro** (spark-avro's ``from_avro``), as runs decode those bodies: a Spark session
  on ``local[1]`` (one core), the bodies cached in the JVM, the decoded columns written to Spark's ``noop`` sink;
  the JVM's CPU time for the job, measured from ``/proc``.

The goal (issue 49): at most 5 us a 1 KiB Protobuf body a core, into Arrow.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

BATCH = 1000


def orders(count: int) -> list[dict]:
    rng = random.Random(7)
    return [
        {
            "order_id": f"o-{i}",
            "quantity": i % 7 + 1,
            "total_cents": 12_345 + i,
            "amount": i * 1.5,
            "status": "PAID" if i % 2 else "NEW",
            "ship": {"city": "Lyon", "zip": 69000 + i % 100},
            "labels": [f"label-{j}" for j in range(5)],
            "lines": [
                {"sku": f"sku-{i}-{j:04d}-abcdefghij", "quantity": j + 1, "price": j * 0.5 + 0.25} for j in range(12)
            ],
            "counts": {f"key{j}": j + 1 for j in range(6)},
            "placed_at": 1_700_000_000 + i,
            "note": bytes(rng.randrange(256) for _ in range(300)),
        }
        for i in range(count)
    ]


def protobuf_bodies(decoder, rows: list[dict]) -> list[bytes]:
    from google.protobuf import message_factory

    order = message_factory.GetMessageClass(decoder.descriptor)
    bodies = []
    for r in rows:
        m = order(
            order_id=r["order_id"],
            quantity=r["quantity"],
            total_cents=r["total_cents"],
            amount=r["amount"],
            status=r["status"],
            labels=r["labels"],
            note=r["note"],
        )
        m.ship.city, m.ship.zip = r["ship"]["city"], r["ship"]["zip"]
        for line in r["lines"]:
            m.lines.add(**line)
        m.counts.update(r["counts"])
        m.placed_at.seconds = r["placed_at"]
        bodies.append(m.SerializeToString())
    return bodies


def cpu_us_per_message(run, count: int, rounds: int) -> float:
    figures = []
    for _ in range(rounds):
        began = time.process_time()
        run()
        figures.append((time.process_time() - began) / count * 1e6)
    return statistics.median(figures[1:] if len(figures) > 1 else figures)


def jvm_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spark_figures(rows: list[dict], rounds: int) -> dict[str, float]:
    """CPU microseconds a message of ``from_json`` and ``from_avro`` on one core, the bodies cached in the JVM."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from rocketlake.spark.session import spark_session

    spark = spark_session("local[1]")
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    ddl = (
        "order_id STRING, quantity INT, total_cents BIGINT, amount DOUBLE, status STRING, "
        "ship STRUCT<city: STRING, zip: INT>, labels ARRAY<STRING>, "
        "lines ARRAY<STRUCT<sku: STRING, quantity: INT, price: DOUBLE>>, counts MAP<STRING, INT>, "
        "placed_at TIMESTAMP, note BINARY"
    )
    typed = [
        {**r, "placed_at": datetime.fromtimestamp(r["placed_at"], tz=timezone.utc), "note": bytearray(r["note"])}
        for r in rows
    ]
    frame = spark.createDataFrame(typed, ddl)
    json_bodies = [json.dumps({**r, "note": base64.b64encode(r["note"]).decode()}).encode() for r in rows]
    schema = frame.schema
    avro = frame.select(to_avro(F.struct(*frame.columns)).alias("body")).cache()
    avro.count()
    json_frame = spark.createDataFrame([(b,) for b in json_bodies], "body BINARY").cache()
    json_frame.count()
    avro_text = spark._jvm.org.apache.spark.sql.avro.SchemaConverters.toAvroType(
        spark._jsparkSession.parseDataType(schema.json()), False, "topLevelRecord", ""
    ).toString()
    jobs = {
        "JSON (from_json, JVM)": lambda: json_frame.select(
            F.from_json(F.col("body").cast("string"), schema).alias("v")
        ).select("v.*"),
        "Avro (from_avro, JVM)": lambda: avro.select(from_avro("body", avro_text).alias("v")).select("v.*"),
    }
    out = {}
    for name, job in jobs.items():
        figures = []
        for _ in range(rounds):
            began = jvm_cpu_seconds(pid)
            job().write.format("noop").mode("overwrite").save()
            figures.append((jvm_cpu_seconds(pid) - began) / len(rows) * 1e6)
        out[name] = statistics.median(figures[1:] if len(figures) > 1 else figures)
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from rocketlake.engine.protobuf import BodyDecoder
    from tests.unit.support import descriptor_set

    descriptors = descriptor_set("order.proto", Path(tempfile.mkdtemp())).read_bytes()
    decoder = BodyDecoder(descriptors, "shop.v1.Order")
    rows = orders(args.messages)
    bodies = protobuf_bodies(decoder, rows)
    size = sum(map(len, bodies)) / len(bodies)
    batches = [bodies[i : i + BATCH] for i in range(0, len(bodies), BATCH)]
    figures = {
        "Protobuf, columnar (ptars + Arrow, the reader's path)": cpu_us_per_message(
            lambda: [decoder.decode(b) for b in batches], len(bodies), args.rounds
        ),
        "Protobuf, reference (message by message)": cpu_us_per_message(
            lambda: [decoder.decode_each(b) for b in batches], len(bodies), args.rounds
        ),
        **spark_figures(rows, args.rounds),
    }
    print(f"{args.messages} orders, {size:.0f} bytes each as Protobuf; CPU us a message, one core, warm rounds:")
    for name, figure in figures.items():
        print(f"  {name:55s} {figure:7.2f}")


if __name__ == "__main__":
    main()
