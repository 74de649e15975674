import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A Java DefaultMQPushConsumer as a member of a group, telling what its rebalances allocate to it.
 *
 * <p>Args: --namesrv, --group, --topic, --client-ip, --instance-name. It subscribes to the topic ("*"), starts,
 * and prints one JSON line per allocation RebalanceImpl asks of its AVG strategy: {"topic", "cid", "cids",
 * "queues": [[topic, broker, id], ...]} (the lists as RebalanceImpl passed them, sorted). It consumes nothing it
 * is given (each message is answered RECONSUME_LATER, but the tests give it a topic without messages) and shuts down
 * (unregistering from every broker) when its stdin closes.
 */
public final class PushMemberPeer {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        String namesrv = null, group = null, topic = null, clientIp = null, instanceName = null;
        for (int i = 0; i < args.length; i += 2) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--client-ip": clientIp = args[i + 1]; break;
                case "--instance-name": instanceName = args[i + 1]; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setClientIP(clientIp);
        consumer.setInstanceName(instanceName);
        consumer.subscribe(topic, "*");
        consumer.setAllocateMessageQueueStrategy(new AllocateMessageQueueAveragely() {
            @Override
            public List<MessageQueue> allocate(String consumerGroup, String currentCID, List<MessageQueue> mqAll,
                                               List<String> cidAll) {
                List<MessageQueue> result = super.allocate(consumerGroup, currentCID, mqAll, cidAll);
                JSONObject line = new JSONObject(true);
                line.put("topic", mqAll.isEmpty() ? null : mqAll.get(0).getTopic());
                line.put("cid", currentCID);
                line.put("cids", cidAll);
                List<List<Object>> queues = new ArrayList<>();
                for (MessageQueue mq : result) {
                    List<Object> q = new ArrayList<>();
                    q.add(mq.getTopic());
                    q.add(mq.getBrokerName());
                    q.add(mq.getQueueId());
                    queues.add(q);
                }
                line.put("queues", queues);
                OUT.println(JSON.toJSONString(line));
                return result;
            }
        });
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) ->
                ConsumeConcurrentlyStatus.RECONSUME_LATER);
        consumer.start();
        OUT.println("{\"started\": \"" + consumer.buildMQClientId() + "\"}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // stdin open: stay a member
        }
        consumer.shutdown();
        OUT.println("{\"stopped\": true}");
    }
}
