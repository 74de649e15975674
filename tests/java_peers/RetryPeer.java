import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A Java DefaultMQPushConsumer whose listener fails chosen messages: the reference for retry and dead letters.
 *
 * <p>Args: --namesrv, --group, --topic, --max-reconsume-times N, and any number of --fail TAG=K: a message with
 * that tag is answered RECONSUME_LATER while its reconsumeTimes is below K (a large K: always). It consumes from
 * the first offset, one message per call, and prints one JSON line per delivery: {"msgId", "tags", "topic",
 * "reconsumeTimes", "status"}. It shuts down when its stdin closes.
 */
public final class RetryPeer {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        String namesrv = null, group = null, topic = null;
        int maxReconsumeTimes = 16;
        Map<String, Integer> failUntil = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--max-reconsume-times": maxReconsumeTimes = Integer.parseInt(args[i + 1]); break;
                case "--fail": {
                    String[] rule = args[i + 1].split("=", 2);
                    failUntil.put(rule[0], Integer.parseInt(rule[1]));
                    break;
                }
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("retry-peer-" + group);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(maxReconsumeTimes);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt m : msgs) {
                Integer until = failUntil.get(m.getTags());
                if (until != null && m.getReconsumeTimes() < until) {
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            for (MessageExt m : msgs) {
                JSONObject line = new JSONObject(true);
                line.put("msgId", m.getMsgId());
                line.put("tags", m.getTags());
                line.put("topic", m.getTopic());
                line.put("reconsumeTimes", m.getReconsumeTimes());
                line.put("status", status.name());
                OUT.println(line.toJSONString());
            }
            return status;
        });
        consumer.start();
        OUT.println("{\"started\": \"" + consumer.buildMQClientId() + "\"}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // stdin open: keep consuming
        }
        consumer.shutdown();
    }
}
