import java.time.Duration;
import java.util.Collections;
import java.util.List;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * A 5.x gRPC SimpleConsumer (rocketmq-client-java), as applications consume through a proxy: it receives (POP at
 * the broker) and acknowledges messages of a topic in a group until it has {@code count} of them.
 *
 * <p>Arguments: the proxy's gRPC endpoint (host:port), the topic, the consumer group, the number of messages.
 * Prints each message id it acknowledged, one a line.
 */
public class GrpcSimpleConsumer {
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) { // the client's gRPC threads are not daemons: without an exit the JVM would stay
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    private static void run(String[] args) throws Exception {
        String endpoint = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
        long deadline = System.currentTimeMillis() + 60_000;
        int acknowledged = 0;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
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
            System.err.println("received " + acknowledged + " of " + count + " messages within 60 s");
            System.exit(2);
        }
    }
}
