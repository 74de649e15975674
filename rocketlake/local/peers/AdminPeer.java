import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The Java admin API as an oracle: one JSON command per stdin line, one JSON answer per line.
 *
 * <p>Commands ("op"): searchOffset {topic, broker, queue_id, timestamp, boundary: LOWER|UPPER (5.x, optional)},
 * minOffset / maxOffset / earliestMsgStoreTime {topic, broker, queue_id}, consumeStats {group, topic},
 * updateConsumeOffset {group, topic, broker, queue_id, offset}. An answer is {"ok": true, "value": ...} or
 * {"ok": false, "error": "..."}; a failing command does not stop the others.
 */
public final class AdminPeer {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    /** Runs of this class in this JVM (PeerServer runs it many times): each run's client is a new instance. */
    private static final AtomicInteger RUNS = new AtomicInteger();

    public static void main(String[] args) throws Exception {
        System.exit(run(args));
    }

    /** The program; returns its exit code (PeerServer calls it without ending the JVM). */
    static int run(String[] args) throws Exception {
        if (args.length != 2 || !args[0].equals("--namesrv")) {
            throw new IllegalArgumentException("usage: AdminPeer --namesrv host:port");
        }
        DefaultMQAdminExt admin = new DefaultMQAdminExt(PeerAcl.hook());
        admin.setNamesrvAddr(args[1]);
        admin.setInstanceName("admin-peer-" + ProcessHandle.current().pid() + "-" + RUNS.incrementAndGet());
        admin.start();
        try {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> answer = new LinkedHashMap<>();
                try {
                    answer.put("value", run(admin, JSON.parseObject(line)));
                    answer.put("ok", true);
                } catch (Exception e) {
                    answer.put("ok", false);
                    answer.put("error", e.toString());
                }
                OUT.println(JSON.toJSONString(answer));
                OUT.flush();
            }
        } finally {
            admin.shutdown();
        }
        return 0;
    }

    private static Object run(DefaultMQAdminExt admin, JSONObject cmd) throws Exception {
        String op = cmd.getString("op");
        switch (op) {
            case "searchOffset": {
                MessageQueue mq = queue(cmd);
                long ts = cmd.getLongValue("timestamp");
                String boundary = cmd.getString("boundary");
                if (boundary == null) {
                    return admin.searchOffset(mq, ts);
                }
                // BoundaryType exists from 5.1.4 on; reflection keeps this file compiling against 4.9 jars.
                Class<?> boundaryType = Class.forName("org.apache.rocketmq.common.BoundaryType");
                Object value = boundaryType.getMethod("valueOf", String.class).invoke(null, boundary);
                java.lang.reflect.Field implField = DefaultMQAdminExt.class.getDeclaredField("defaultMQAdminExtImpl");
                implField.setAccessible(true);
                Object impl = implField.get(admin);
                Object clientInstance = impl.getClass().getMethod("getMqClientInstance").invoke(impl);
                Object adminImpl = clientInstance.getClass().getMethod("getMQAdminImpl").invoke(clientInstance);
                Method search = adminImpl.getClass().getMethod("searchOffset", MessageQueue.class, long.class, boundaryType);
                return search.invoke(adminImpl, mq, ts, value);
            }
            case "minOffset":
                return admin.minOffset(queue(cmd));
            case "maxOffset":
                return admin.maxOffset(queue(cmd));
            case "earliestMsgStoreTime":
                return admin.earliestMsgStoreTime(queue(cmd));
            case "consumeStats": {
                var stats = admin.examineConsumeStats(cmd.getString("group"), cmd.getString("topic"));
                List<Map<String, Object>> rows = new ArrayList<>();
                for (var e : stats.getOffsetTable().entrySet()) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("topic", e.getKey().getTopic());
                    row.put("broker", e.getKey().getBrokerName());
                    row.put("queue_id", e.getKey().getQueueId());
                    row.put("broker_offset", e.getValue().getBrokerOffset());
                    row.put("consumer_offset", e.getValue().getConsumerOffset());
                    rows.add(row);
                }
                return rows;
            }
            case "updateConsumeOffset": {
                MessageQueue mq = queue(cmd);
                var route = admin.examineTopicRouteInfo(mq.getTopic());
                String addr = null;
                for (var bd : route.getBrokerDatas()) {
                    if (bd.getBrokerName().equals(mq.getBrokerName())) {
                        addr = bd.selectBrokerAddr();
                    }
                }
                admin.updateConsumeOffset(addr, cmd.getString("group"), mq, cmd.getLongValue("offset"));
                return addr;
            }
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static MessageQueue queue(JSONObject cmd) {
        return new MessageQueue(cmd.getString("topic"), cmd.getString("broker"), cmd.getIntValue("queue_id"));
    }
}
