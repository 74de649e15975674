"""Child of ``pull_cost --checkout``: read every queue of a topic with the reader of the checkout it runs in.

    cd CHECKOUT && python -c "import runpy; runpy.run_path('.../read_checkout.py', run_name='__main__')" \\
        NAMESRV TOPIC PULL_BATCH READS

Run with the checkout as the working directory (``-c`` puts it first on ``sys.path``), so ``rocketlake`` is that
checkout's package, not the installed one; a checkout from before the library moved into ``rocketlake/`` (49224e7)
has its parts in ``pipelines/`` and ``resources/``, which its installs mapped to ``rocketlake.pipelines`` and
``rocketlake.resources``: found the same way here (the checkout's folder added to the package's path, nothing written
to it). Prints the CPU seconds of each read, the first one included (the
parent leaves it out: connections, routes and caches are made there).
"""

from __future__ import annotations

import os
import sys
import time


def _import_reader():
    if os.path.isdir("rocketlake/engine"):
        from rocketlake.engine.options import parse_options
        from rocketlake.rocketmq.client import RocketMQClient
        from rocketlake.rocketmq.message_queue import OffsetRange
        from rocketlake.spark.source import Chunk, RocketMQReader
    else:
        import rocketlake

        rocketlake.__path__.append(os.getcwd())  # rocketlake.pipelines is ./pipelines, as its install mapped it
        from rocketlake.pipelines.options import parse_options
        from rocketlake.pipelines.source import Chunk, RocketMQReader
        from rocketlake.resources.rocketmq.client import RocketMQClient
        from rocketlake.resources.rocketmq.message_queue import OffsetRange
    here = os.path.realpath(os.getcwd())
    foreign = [
        module.__file__
        for name, module in list(sys.modules.items())
        if name.startswith("rocketlake") and getattr(module, "__file__", None)
        if not os.path.realpath(module.__file__).startswith(here + os.sep)
    ]
    if foreign:  # an editable install serves modules the checkout lacks: the figures would not be the checkout's
        raise SystemExit(f"modules not from {here}: {foreign[:3]}")
    return parse_options, RocketMQClient, OffsetRange, Chunk, RocketMQReader


def main() -> None:
    namesrv, topic, batch, reads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    parse_options, RocketMQClient, OffsetRange, Chunk, RocketMQReader = _import_reader()
    client = RocketMQClient(namesrv)
    ranges = [OffsetRange(mq, 0, client.get_max_offset(mq)) for mq in client.queues(topic)]
    figures = []
    for _ in range(reads):
        reader = RocketMQReader(parse_options({"namesrv": namesrv, "topic": topic, "pullBatchSize": str(batch)}))
        rows, began = 0, time.process_time()
        for offsets in ranges:
            for batch_out in reader.read(Chunk(offsets)):
                rows += batch_out.num_rows
        figures.append(f"{rows}:{time.process_time() - began:.4f}")
    print(" ".join(figures))


if __name__ == "__main__":
    main()
