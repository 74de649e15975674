import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The independent producer our tests compare against: the official Java client sends, and we
 * print exactly what the broker answered, one JSON line per message.
 *
 * <p>Two ways to describe messages:
 * <ul>
 *   <li>stdin, one JSON object per line: {"topic","tags","keys":[..],"properties":{..},"body" (UTF-8 text)
 *       or "body_base64","broker","queue_id","repeat"}, or {"batch":[messages],"broker","queue_id"} for one batch send
 *       ("repeat": n sends of one message, stored n times with one msgId, as a producer's retry stores it);</li>
 *   <li>the command line, for bulk data: --topic T --count N [--body-size B] [--tags X] [--batch K]
 *       [--rate R] (at most R messages a second, paced from the start: a steady producer).</li>
 * </ul>
 * Either way, --compress-over B compresses bodies of B bytes or more, with --compress-type ZLIB, LZ4 or ZSTD (5.x).
 * With --transactional true [--commit-delay-ms D] it is a TransactionMQProducer: a stdin message with "transaction"
 * ("commit", "rollback" or "unknown") is sent in a transaction whose local outcome comes D ms later; a message
 * with "delay_level" is delivered by the broker's schedule, one with "deliver_time_ms" by its timer wheel (5.x). --namespace N sends in RocketMQ's namespace N;
 * --namespace-v2 N in its second form (5.x: N in every request's fields).
 * Output per message: {"index","topic","msgId","offsetMsgId","brokerName","queueId","queueOffset","status"}.
 */
public final class ProducerPeer {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    /** Runs of this class in this JVM (PeerServer runs it many times): each run's client is a new instance. */
    private static final AtomicInteger RUNS = new AtomicInteger();

    public static void main(String[] args) throws Exception {
        System.exit(run(args));
    }

    /**
     * The 5.x producer's own compression setting (ZLIB, LZ4 or ZSTD: the body's compression type travels in the
     * message's sysFlag). Through reflection: the 4.x client, which this class also compiles against, has only zlib.
     */
    private static void setCompressType(DefaultMQProducer producer, String type) throws Exception {
        Class<?> types = Class.forName("org.apache.rocketmq.common.compression.CompressionType");
        Object value = types.getMethod("valueOf", String.class).invoke(null, type);
        producer.getClass().getMethod("setCompressType", types).invoke(producer, value);
    }

    /** The program; returns its exit code (PeerServer calls it without ending the JVM). */
    static int run(String[] args) throws Exception {
        Map<String, String> opts = parseArgs(args);
        String namesrv = require(opts, "namesrv");
        String group = opts.getOrDefault("group", "rocketlake_peer_producer");
        DefaultMQProducer producer;
        if (opts.containsKey("transactional")) {
            TransactionMQProducer transactional = new TransactionMQProducer(group, PeerAcl.hook());
            transactional.setTransactionListener(
                new Outcomes(Long.parseLong(opts.getOrDefault("commit-delay-ms", "0"))));
            producer = transactional;
        } else {
            producer = new DefaultMQProducer(group, PeerAcl.hook());
        }
        producer.setNamesrvAddr(namesrv);
        if (opts.containsKey("namespace")) {
            producer.setNamespace(opts.get("namespace"));  // the client wraps topics: ns%topic
        }
        if (opts.containsKey("namespace-v2")) {
            // 5.x only (the 4.9 client has no such setter, and this file is compiled against both): the namespace
            // in every request's fields, names unwrapped.
            producer.getClass().getMethod("setNamespaceV2", String.class).invoke(producer, opts.get("namespace-v2"));
        }
        producer.setInstanceName("peer-" + ProcessHandle.current().pid() + "-" + RUNS.incrementAndGet());
        producer.setSendMsgTimeout(Integer.parseInt(opts.getOrDefault("send-timeout-ms", "10000")));
        producer.setRetryTimesWhenSendFailed(2);
        if (opts.containsKey("compress-over")) {
            producer.setCompressMsgBodyOverHowmuch(Integer.parseInt(opts.get("compress-over")));
        }
        if (opts.containsKey("compress-type")) {
            setCompressType(producer, opts.get("compress-type"));
        }
        producer.start();
        int exit = 0;
        Map<MessageQueue, Long> sent = new HashMap<>();
        try {
            if (opts.containsKey("count")) {
                sendGenerated(producer, opts, sent);
            } else {
                sendFromStdin(producer, sent);
            }
            awaitDispatch(producer, sent);
        } catch (Exception e) {
            System.err.println("ProducerPeer failed: " + e);
            e.printStackTrace(System.err);
            exit = 1;
        } finally {
            OUT.flush();
            producer.shutdown();
        }
        return exit;
    }

    private static void sendFromStdin(DefaultMQProducer producer, Map<MessageQueue, Long> sent) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        int index = 0;
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JSONObject spec = JSON.parseObject(line);
            List<Message> messages = new ArrayList<>();
            if (spec.containsKey("batch")) {
                JSONArray batch = spec.getJSONArray("batch");
                for (int i = 0; i < batch.size(); i++) {
                    messages.add(toMessage(batch.getJSONObject(i)));
                }
            } else {
                messages.add(toMessage(spec));
            }
            MessageQueue target = null;
            if (spec.containsKey("broker")) {
                target = new MessageQueue(messages.get(0).getTopic(), spec.getString("broker"), spec.getIntValue("queue_id"));
            }
            // "repeat": n sends of the same Message, as a producer's retry after a lost answer does: its UNIQ_KEY,
            // set by the first send, is kept, and the broker stores it n times (n offsets, one msgId).
            for (int n = spec.getIntValue("repeat") > 1 ? spec.getIntValue("repeat") : 1; n > 0; n--) {
                index = send(producer, messages, target, spec.containsKey("batch"), index, sent);
            }
        }
    }

    private static void sendGenerated(DefaultMQProducer producer, Map<String, String> opts,
                                      Map<MessageQueue, Long> sent) throws Exception {
        String topic = require(opts, "topic");
        int count = Integer.parseInt(opts.get("count"));
        int bodySize = Integer.parseInt(opts.getOrDefault("body-size", "100"));
        int batch = Integer.parseInt(opts.getOrDefault("batch", "1"));
        String tags = opts.get("tags");
        double rate = Double.parseDouble(opts.getOrDefault("rate", "0"));
        long started = System.nanoTime();
        int index = 0;
        while (index < count) {
            if (rate > 0) {  // message {@code index} goes no earlier than index / rate seconds after the start
                long due = started + (long) (index / rate * 1e9);
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            List<Message> messages = new ArrayList<>();
            for (int i = 0; i < batch && index + i < count; i++) {
                byte[] body = new byte[bodySize];
                byte[] stamp = ("message-" + (index + i) + " ").getBytes(StandardCharsets.UTF_8);
                for (int b = 0; b < bodySize; b++) {
                    body[b] = b < stamp.length ? stamp[b] : (byte) ('a' + (index + i + b) % 26);
                }
                Message m = new Message(topic, tags, "key-" + (index + i), body);
                messages.add(m);
            }
            index = send(producer, messages, null, batch > 1, index, sent);
        }
    }

    private static Message toMessage(JSONObject spec) {
        byte[] body;
        if (spec.containsKey("body_base64")) {
            body = Base64.getDecoder().decode(spec.getString("body_base64"));
        } else {
            body = spec.getString("body").getBytes(StandardCharsets.UTF_8);
        }
        Message m = new Message(spec.getString("topic"), body);
        if (spec.containsKey("tags")) {
            m.setTags(spec.getString("tags"));
        }
        if (spec.containsKey("keys")) {
            List<String> keys = spec.getJSONArray("keys").toJavaList(String.class);
            m.setKeys(keys);
        }
        if (spec.containsKey("message_group")) {  // a 5.x FIFO message's group, as the proxy stores it
            MessageAccessor.putProperty(m, "__SHARDINGKEY", spec.getString("message_group"));
        }
        if (spec.containsKey("delay_level")) {
            m.setDelayTimeLevel(spec.getIntValue("delay_level"));  // delivered later, by the broker's schedule
        }
        if (spec.containsKey("deliver_time_ms")) {  // a 5.x timer message: stored in the topic at that instant
            // Message#setDeliverTimeMs's property, put by name: the 4.9 client this peer also compiles against has none.
            MessageAccessor.putProperty(m, "TIMER_DELIVER_MS", String.valueOf(spec.getLongValue("deliver_time_ms")));
        }
        if (spec.containsKey("transaction")) {
            m.putUserProperty("peer_transaction", spec.getString("transaction"));
        }
        JSONObject props = spec.getJSONObject("properties");
        if (props != null) {
            for (String k : props.keySet()) {
                m.putUserProperty(k, props.getString(k));
            }
        }
        return m;
    }

    /**
     * A transaction's local outcome, as each message asks for it ("transaction": "commit", "rollback" or "unknown"),
     * given after {@code commitDelayMs}: the broker then writes a committed message to its topic, with that
     * moment's store time. A broker asking back about an unknown one is told to roll it back.
     */
    private static final class Outcomes implements TransactionListener {
        private final long commitDelayMs;

        Outcomes(long commitDelayMs) {
            this.commitDelayMs = commitDelayMs;
        }

        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object outcome) {
            try {
                Thread.sleep(commitDelayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            switch (String.valueOf(outcome)) {
                case "commit": return LocalTransactionState.COMMIT_MESSAGE;
                case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                default: return LocalTransactionState.UNKNOW;
            }
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }
    }

    private static int send(DefaultMQProducer producer, List<Message> messages, MessageQueue target, boolean asBatch,
                            int index, Map<MessageQueue, Long> sent) throws Exception {
        if (!asBatch) {
            for (Message m : messages) {
                String outcome = m.getUserProperty("peer_transaction");
                if (outcome != null) {
                    SendResult r = ((TransactionMQProducer) producer).sendMessageInTransaction(m, outcome);
                    print(index++, m.getTopic(), r.getMsgId(), r.getOffsetMsgId(), r, 0);
                    continue;  // its queue offset is the half topic's: the committed message comes later
                }
                SendResult r = target == null ? producer.send(m) : producer.send(m, target);
                print(index++, m.getTopic(), r.getMsgId(), r.getOffsetMsgId(), r, 0);
                if (deliveredNow(m)) {
                    sent.merge(r.getMessageQueue(), r.getQueueOffset() + 1, Math::max);
                }
            }
            return index;
        }
        SendResult r = target == null ? producer.send(messages) : producer.send(messages, target);
        sent.merge(r.getMessageQueue(), r.getQueueOffset() + messages.size(), Math::max);
        // A batch answers with comma-joined ids and the offset of its first message.
        String[] msgIds = r.getMsgId().split(",");
        String[] offsetIds = r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
        for (int i = 0; i < messages.size(); i++) {
            print(index++, messages.get(i).getTopic(), msgIds[i], i < offsetIds.length ? offsetIds[i] : null, r, i);
        }
        return index;
    }

    /** Stored in its topic's queue as sent: not delayed (schedule or timer wheel), whose offset is another topic's. */
    private static boolean deliveredNow(Message m) {
        return m.getDelayTimeLevel() <= 0 && m.getProperty("TIMER_DELIVER_MS") == null
            && m.getProperty("TIMER_DELAY_SEC") == null && m.getProperty("TIMER_DELAY_MS") == null;
    }

    /**
     * Returns once every queue written to holds the messages sent to it, as a consumer sees them. A broker answers a
     * send when the message is in its commit log; its dispatch (ReputMessageService) puts it in the consume queue a
     * little later, so a caller that read a queue's max offset right after the send could miss its last messages.
     * Bounded: after 10 s it returns anyway (the caller's own checks then say what is missing); a broker that cannot
     * answer GET_MAX_OFFSET here (a proxy, an ACL) is not waited for.
     */
    private static void awaitDispatch(DefaultMQProducer producer, Map<MessageQueue, Long> sent) throws Exception {
        long deadline = System.nanoTime() + 10_000_000_000L;
        for (Map.Entry<MessageQueue, Long> e : sent.entrySet()) {
            try {
                while (producer.maxOffset(e.getKey()) < e.getValue() && System.nanoTime() < deadline) {
                    Thread.sleep(2);  // the dispatch runs every millisecond
                }
            } catch (Exception refused) {
                // not answerable here: nothing to wait on
            }
        }
    }

    private static void print(int index, String topic, String msgId, String offsetMsgId, SendResult r, int inBatch) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("index", index);
        line.put("topic", topic);
        line.put("msgId", msgId);
        line.put("offsetMsgId", offsetMsgId);
        line.put("brokerName", r.getMessageQueue().getBrokerName());
        line.put("queueId", r.getMessageQueue().getQueueId());
        line.put("queueOffset", r.getQueueOffset() + inBatch);
        line.put("status", r.getSendStatus().name());
        OUT.println(JSON.toJSONString(line));
    }

    private static Map<String, String> parseArgs(String[] args) {
        Map<String, String> opts = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --name value pairs, got: " + String.join(" ", args));
            }
            opts.put(args[i].substring(2), args[++i]);
        }
        return opts;
    }

    private static String require(Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v;
    }
}
