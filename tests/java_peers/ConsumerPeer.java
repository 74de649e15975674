import com.alibaba.fastjson.JSON;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The official Java pull consumer (DefaultLitePullConsumer with assign and seek) reading exact
 * offset ranges: the reference our Python client is compared with, field by field and for speed.
 *
 * <p>--namesrv A --topic T --queues broker:queueId:from:until[,...] [--subscription EXPR]
 * [--pull-batch-size N] [--mode dump|bench]. dump prints one JSON line per message with every field;
 * bench prints one line {"messages","bytes","seconds"}, timed from the first poll to the last message.
 */
public final class ConsumerPeer {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    /** Runs of this class in this JVM (PeerServer runs it many times): each run's client is a new instance. */
    private static final AtomicInteger RUNS = new AtomicInteger();

    public static void main(String[] args) {
        // The client's threads are not daemons: an exception leaving main would keep the JVM alive until
        // the caller's timeout. Any failure ends the process at once, with its stack on stderr.
        System.exit(run(args));
    }

    /** The program; returns its exit code, 2 on any failure (PeerServer calls it without ending the JVM). */
    static int run(String[] args) {
        try {
            consume(args);
            return 0;
        } catch (Throwable t) {
            t.printStackTrace();
            return 2;
        }
    }

    /**
     * seek() asks the broker for the queue's min and max offsets; right after commit-log files are
     * deleted the broker can be slow to answer (its clean service holds the store), so a failed lookup is
     * retried for up to 30 s before it is an error.
     */
    private static void seek(DefaultLitePullConsumer consumer, MessageQueue mq, long offset) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try {
                consumer.seek(mq, offset);
                return;
            } catch (org.apache.rocketmq.client.exception.MQClientException e) {
                if (System.nanoTime() > deadline || e.getMessage() == null || !e.getMessage().startsWith("Invoke Broker")) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    private static void consume(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            opts.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        String topic = opts.get("topic");
        boolean bench = "bench".equals(opts.getOrDefault("mode", "dump"));
        boolean filtered = opts.containsKey("subscription");
        // One group and client instance per run: PeerServer runs this class many times in one JVM.
        String run = ProcessHandle.current().pid() + "_" + RUNS.incrementAndGet();
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("rocketlake_peer_consumer_" + run, PeerAcl.hook());
        consumer.setNamesrvAddr(opts.get("namesrv"));
        consumer.setInstanceName("consumer-peer-" + run);
        consumer.setAutoCommit(false);
        consumer.setPullBatchSize(Integer.parseInt(opts.getOrDefault("pull-batch-size", "32")));
        if (opts.containsKey("subscription")) {
            consumer.setSubExpressionForAssign(topic, opts.get("subscription"));
        }
        consumer.start();
        try {
            read(consumer, opts, topic, bench, filtered);
        } finally {
            // In a PeerServer, a consumer left running (after a failure too) would outlive the request.
            consumer.shutdown();
        }
    }

    private static void read(DefaultLitePullConsumer consumer, Map<String, String> opts, String topic, boolean bench,
                             boolean filtered) throws Exception {
        Map<MessageQueue, long[]> ranges = new LinkedHashMap<>();
        for (String spec : opts.get("queues").split(",")) {
            String[] p = spec.split(":");
            ranges.put(new MessageQueue(topic, p[0], Integer.parseInt(p[1])), new long[] {Long.parseLong(p[2]), Long.parseLong(p[3])});
        }
        List<MessageQueue> queues = new ArrayList<>(ranges.keySet());
        consumer.assign(queues);
        for (MessageQueue mq : queues) {
            seek(consumer, mq, ranges.get(mq)[0]);
        }
        Map<MessageQueue, Long> done = new HashMap<>();
        // assign() may start pulling before seek() lands, so batches from other offsets can arrive
        // (again, or ahead of the range): only the next offset of each range is taken.
        Map<MessageQueue, Long> next = new HashMap<>();
        Map<MessageQueue, Long> reseekAt = new HashMap<>();
        Map<MessageQueue, Long> progressAt = new HashMap<>();
        for (MessageQueue mq : queues) {
            long[] range = ranges.get(mq);
            next.put(mq, range[0]);
            if (range[0] >= range[1]) {
                done.put(mq, range[0]);
                consumer.pause(List.of(mq));
            }
        }
        long messages = 0;
        long bytes = 0;
        long idleSince = System.nanoTime();
        long start = System.nanoTime();
        while (done.size() < queues.size()) {
            List<MessageExt> batch = consumer.poll(200);
            // A queue without progress for 2 s while unfinished: its pull task may be parked on an
            // offset from before the seek (a long poll at the queue's end); seek it again.
            long now = System.nanoTime();
            for (MessageQueue mq : queues) {
                if (!done.containsKey(mq) && now - progressAt.getOrDefault(mq, start) > 2_000_000_000L) {
                    progressAt.put(mq, now);
                    seek(consumer, mq, next.get(mq));
                }
            }
            // Stop when nothing new arrived for 10 s: offsets past the last matching message never arrive
            // when a filter drops them, and redelivered batches must not keep the loop alive.
            if (System.nanoTime() - idleSince > 10_000_000_000L) {
                break;
            }
            for (MessageExt m : batch) {
                MessageQueue mq = new MessageQueue(m.getTopic(), m.getBrokerName(), m.getQueueId());
                long[] range = ranges.get(mq);
                if (range == null || done.containsKey(mq) || m.getQueueOffset() < next.get(mq)) {
                    continue;
                }
                if (m.getQueueOffset() > next.get(mq) && !filtered) {
                    // A batch from a pull issued before the seek landed skipped ahead: seek again
                    // (once per position) so the consumer goes back for the offsets in between.
                    if (!next.get(mq).equals(reseekAt.get(mq))) {
                        reseekAt.put(mq, next.get(mq));
                        seek(consumer, mq, next.get(mq));
                    }
                    continue;
                }
                if (m.getQueueOffset() >= range[1]) {
                    done.put(mq, m.getQueueOffset());  // filtered: nothing else in the range matches
                    consumer.pause(List.of(mq));
                    continue;
                }
                next.put(mq, m.getQueueOffset() + 1);
                idleSince = System.nanoTime();
                progressAt.put(mq, idleSince);
                messages++;
                bytes += m.getBody().length;
                if (!bench) {
                    print(m);
                }
                if (m.getQueueOffset() + 1 >= range[1]) {
                    done.put(mq, m.getQueueOffset());
                    consumer.pause(List.of(mq));
                }
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        if (bench) {
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("messages", messages);
            line.put("bytes", bytes);
            line.put("seconds", seconds);
            OUT.println(JSON.toJSONString(line));
        }
        OUT.flush();
    }

    private static void print(MessageExt m) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("topic", m.getTopic());
        line.put("brokerName", m.getBrokerName());
        line.put("queueId", m.getQueueId());
        line.put("queueOffset", m.getQueueOffset());
        line.put("msgId", m.getMsgId());
        // Pulled messages are MessageClientExt: msgId is the producer's unique key, offsetMsgId the store's.
        line.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId());
        line.put("tags", m.getTags());
        line.put("keys", m.getKeys());
        line.put("properties", m.getProperties());
        line.put("bornTimestamp", m.getBornTimestamp());
        line.put("storeTimestamp", m.getStoreTimestamp());
        line.put("bornHost", m.getBornHostString() + ":" + ((java.net.InetSocketAddress) m.getBornHost()).getPort());
        line.put("storeHost", ((java.net.InetSocketAddress) m.getStoreHost()).getAddress().getHostAddress() + ":"
            + ((java.net.InetSocketAddress) m.getStoreHost()).getPort());
        line.put("reconsumeTimes", m.getReconsumeTimes());
        line.put("commitLogOffset", m.getCommitLogOffset());
        line.put("sysFlag", m.getSysFlag());
        line.put("bodyCRC", m.getBodyCRC());
        line.put("storeSize", m.getStoreSize());
        line.put("bodyBase64", Base64.getEncoder().encodeToString(m.getBody()));
        OUT.println(JSON.toJSONString(line));
    }
}
