import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The ACL account the peers sign with on a cluster that enforces ACL: the one mqadmin reads too,
 * {@code ${rocketmq.home.dir}/conf/tools.yml} ({@code accessKey: ...}, {@code secretKey: ...}), which the
 * local runtime writes for such a cluster. No file: no signing (null hook), as on every other cluster.
 */
final class PeerAcl {
    private PeerAcl() {
    }

    static RPCHook hook() throws IOException {
        String home = System.getProperty("rocketmq.home.dir");
        if (home == null) {
            return null;
        }
        Path tools = Paths.get(home, "conf", "tools.yml");
        if (!Files.exists(tools)) {
            return null;
        }
        String accessKey = null;
        String secretKey = null;
        for (String line : Files.readAllLines(tools, StandardCharsets.UTF_8)) {
            String[] kv = line.split(":", 2);
            if (kv.length == 2 && kv[0].trim().equals("accessKey")) {
                accessKey = kv[1].trim();
            } else if (kv.length == 2 && kv[0].trim().equals("secretKey")) {
                secretKey = kv[1].trim();
            }
        }
        return accessKey == null || secretKey == null ? null
            : new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }
}
