"""The README's first command: a local cluster with a demo topic full of sample orders.

Until the ingestion job lands this is the whole main job: start the cluster, create the topic
(4 queues on each broker), produce JSON orders with the official Java client, show what the
brokers hold.
"""

from __future__ import annotations

import json
import random
from collections import Counter

from resources.local.cluster import LocalCluster
from resources.local.peers import produce
from resources.local.spec import ClusterSpec

REGIONS = ("north", "south", "east", "west")


def sample_orders(topic: str, count: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    orders = []
    for i in range(count):
        region = REGIONS[i % len(REGIONS)]
        body = {"order_id": f"o-{i:06d}", "customer": f"c-{rng.randrange(1000):04d}",
                "amount": round(rng.uniform(1, 500), 2), "region": region}
        orders.append({"topic": topic, "tags": region, "keys": [body["order_id"]], "body": json.dumps(body)})
    return orders


def run_demo(spec: ClusterSpec, topic: str, messages: int) -> int:
    cluster = LocalCluster(spec)
    print(f"1/3 starting the local RocketMQ cluster (state in {spec.state_dir}) ...", flush=True)
    cluster.up()
    print(f"2/3 creating topic {topic} with 4 queues on each broker ...", flush=True)
    cluster.create_topic(topic, 4)
    print(f"3/3 producing {messages} sample orders with the Java RocketMQ client ...", flush=True)
    sent = produce(spec.namesrv_address, spec.state_dir, sample_orders(topic, messages))
    per_queue = Counter((s.broker_name, s.queue_id) for s in sent)
    print()
    print(cluster.status().render(spec.cluster_name))
    print()
    print(f"topic {topic} (mqadmin topicStatus):")
    print(f"  {'broker':<10} {'queue':>5} {'min':>6} {'max':>6} {'sent now':>9}")
    for q in cluster.mqadmin().topic_status(topic):
        print(f"  {q.broker_name:<10} {q.queue_id:>5} {q.min_offset:>6} {q.max_offset:>6} "
              f"{per_queue.get((q.broker_name, q.queue_id), 0):>9}")
    print()
    print(f"sent {len(sent)} messages; stop the cluster with: rocketlake local down")
    return 0
