import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * A 5.x application on the gRPC client (rocketmq-client-java), talking to a proxy's gRPC endpoint (host:port).
 *
 * <ul>
 *   <li>{@code consume <endpoint> <topic> <group> <count>}: a SimpleConsumer receives (POP at the broker) and
 *       acknowledges messages of the topic in the group until it has {@code count}; prints each message id.
 *   <li>{@code produce-fifo <endpoint> <topic>}: a producer sends FIFO messages, one a line on stdin as
 *       {@code key<TAB>message group<TAB>body}; prints the message id the proxy answered for each, in order.
 * </ul>
 */
public class GrpcClient {
    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "consume" -> consume(configuration(args[1]), args[2], args[3], Integer.parseInt(args[4]));
                case "produce-fifo" -> produceFifo(configuration(args[1]), args[2]);
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Throwable e) { // the client's gRPC threads are not daemons: without an exit the JVM would stay
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    private static ClientConfiguration configuration(String endpoint) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
    }

    private static void consume(ClientConfiguration configuration, String topic, String group, int count)
        throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        int acknowledged = 0;
        try (SimpleConsumer consumer = ClientServiceProvider.loadService().newSimpleConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build()) {
            while (acknowledged < count && System.currentTimeMillis() < deadline) {
                List<MessageView> views = consumer.receive(count - acknowledged, Duration.ofSeconds(30));
                for (MessageView view : views) {
                    consumer.ack(view);
                    System.out.println(view.getMessageId());
                    acknowledged++;
                }
            }
        }
        if (acknowledged < count) {
            throw new IllegalStateException("received " + acknowledged + " of " + count + " messages within 60 s");
        }
    }

    private static void produceFifo(ClientConfiguration configuration, String topic) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (Producer producer = provider.newProducerBuilder()
            .setClientConfiguration(configuration)
            .setTopics(topic)
            .build()) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] fields = line.split("\t", 3);
                Message message = provider.newMessageBuilder()
                    .setTopic(topic)
                    .setKeys(fields[0])
                    .setMessageGroup(fields[1])
                    .setBody(fields[2].getBytes(StandardCharsets.UTF_8))
                    .build();
                SendReceipt receipt = producer.send(message);
                System.out.println(receipt.getMessageId());
            }
        }
    }
}
