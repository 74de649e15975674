import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * A 5.x gRPC producer (rocketmq-client-java) sending FIFO messages through a proxy, as applications send them: each
 * with its message group, one group's messages one after the other.
 *
 * <p>Arguments: the proxy's gRPC endpoint (host:port) and a FIFO topic. Reads one message a line on stdin, as
 * {@code key<TAB>message group<TAB>body}; prints the message id the proxy answered for each, one a line, in order.
 */
public class GrpcFifoProducer {
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
        String endpoint = args[0], topic = args[1];
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
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
