import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMachineRoomNearby;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByConfig;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByMachineRoom;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The Java allocation strategies as an oracle: one JSON case per stdin line, one JSON answer per line.
 *
 * <p>A case: {"id", "group", "strategy": {"name": AVG | AVG_BY_CIRCLE | CONFIG | MACHINE_ROOM |
 * MACHINE_ROOM_NEARBY | CONSISTENT_HASH, "queues": [[topic, broker, id], ...] (CONFIG), "rooms": [...]
 * (MACHINE_ROOM), "vnodes": n (CONSISTENT_HASH), "inner": {strategy} (MACHINE_ROOM_NEARBY)},
 * "queues": [[topic, broker, id], ...], "cids": [...], "sort": bool, "ask": [cid, ...]}.
 * With "sort", the lists are sorted as RebalanceImpl.rebalanceByTopic sorts them (and echoed back as
 * "sortedQueues" / "sortedCids"). The strategy is built once per case and asked for every cid of "ask";
 * the answer is {"id", "answers": [{"queues": [...]} | {"error": "..."}, ...]} or {"id", "error"} when the
 * strategy cannot be built.
 *
 * <p>MACHINE_ROOM_NEARBY's resolver (the rule rocketlake.engine.allocation.PrefixMachineRoomResolver
 * shares): the room is the text before the first '@' of the broker name or client id, the whole name
 * when it has none.
 */
public final class AllocatePeer {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        System.exit(run(args));
    }

    /** The program; returns its exit code (PeerServer calls it without ending the JVM). */
    static int run(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            OUT.println(JSON.toJSONString(answer(JSON.parseObject(line))));
        }
        OUT.flush();
        return 0;
    }

    private static Map<String, Object> answer(JSONObject c) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", c.get("id"));
        AllocateMessageQueueStrategy strategy;
        try {
            strategy = strategy(c.getJSONObject("strategy"));
        } catch (Exception e) {
            out.put("error", e.toString());
            return out;
        }
        out.put("name", strategy.getName());
        List<MessageQueue> mqAll = queues(c.getJSONArray("queues"));
        List<String> cidAll = new ArrayList<>();
        for (Object cid : c.getJSONArray("cids")) {
            cidAll.add((String) cid);
        }
        if (c.getBooleanValue("sort")) {
            Collections.sort(mqAll);
            Collections.sort(cidAll);
            out.put("sortedQueues", json(mqAll));
            out.put("sortedCids", cidAll);
        }
        List<Object> answers = new ArrayList<>();
        for (Object cid : c.getJSONArray("ask")) {
            Map<String, Object> a = new LinkedHashMap<>();
            try {
                // copies: a strategy must not see (or leave) another member's changes
                List<MessageQueue> result = strategy.allocate(c.getString("group"), (String) cid,
                    new ArrayList<>(mqAll), new ArrayList<>(cidAll));
                a.put("queues", result == null ? null : json(result));
            } catch (Exception e) {
                a.put("error", e.toString());
            }
            answers.add(a);
        }
        out.put("answers", answers);
        return out;
    }

    private static AllocateMessageQueueStrategy strategy(JSONObject s) {
        String name = s.getString("name");
        switch (name) {
            case "AVG":
                return new AllocateMessageQueueAveragely();
            case "AVG_BY_CIRCLE":
                return new AllocateMessageQueueAveragelyByCircle();
            case "CONFIG": {
                AllocateMessageQueueByConfig config = new AllocateMessageQueueByConfig();
                config.setMessageQueueList(queues(s.getJSONArray("queues")));
                return config;
            }
            case "MACHINE_ROOM": {
                AllocateMessageQueueByMachineRoom room = new AllocateMessageQueueByMachineRoom();
                HashSet<String> rooms = new HashSet<>();
                for (Object r : s.getJSONArray("rooms")) {
                    rooms.add((String) r);
                }
                room.setConsumeridcs(rooms);
                return room;
            }
            case "CONSISTENT_HASH":
                return s.containsKey("vnodes") ? new AllocateMessageQueueConsistentHash(s.getIntValue("vnodes"))
                    : new AllocateMessageQueueConsistentHash();
            case "MACHINE_ROOM_NEARBY":
                return new AllocateMachineRoomNearby(strategy(s.getJSONObject("inner")),
                    new AllocateMachineRoomNearby.MachineRoomResolver() {
                        @Override
                        public String brokerDeployIn(MessageQueue mq) {
                            return room(mq.getBrokerName());
                        }

                        @Override
                        public String consumerDeployIn(String clientID) {
                            return room(clientID);
                        }
                    });
            default:
                throw new IllegalArgumentException("unknown strategy " + name);
        }
    }

    private static String room(String name) {
        int at = name.indexOf('@');
        return at < 0 ? name : name.substring(0, at);
    }

    private static List<MessageQueue> queues(JSONArray array) {
        List<MessageQueue> list = new ArrayList<>();
        for (int i = 0; i < array.size(); i++) {
            JSONArray q = array.getJSONArray(i);
            list.add(new MessageQueue(q.getString(0), q.getString(1), q.getIntValue(2)));
        }
        return list;
    }

    private static List<Object> json(List<MessageQueue> queues) {
        List<Object> list = new ArrayList<>();
        for (MessageQueue mq : queues) {
            List<Object> q = new ArrayList<>();
            q.add(mq.getTopic());
            q.add(mq.getBrokerName());
            q.add(mq.getQueueId());
            list.add(q);
        }
        return list;
    }
}
