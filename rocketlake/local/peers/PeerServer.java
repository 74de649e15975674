import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.management.LockInfo;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ForkJoinPool;

/**
 * One JVM that runs the peer programs (and mqadmin) many times, so each call costs a method call instead of a JVM
 * start. Started by rocketlake/local/peers.py, one per RocketMQ version and state directory.
 *
 * <p>Protocol: one request per stdin line, {"main": "ProducerPeer" | "AdminPeer" |
 * "org.apache.rocketmq.tools.command.MQAdminStartup" | a program compiled beside them (the tests' "ConsumerPeer",
 * "AllocatePeer"), "args": [...], "stdin": "..."}. The server answers on its stdout
 * with the line {@code #peer-begin-<token>} once it has read the request, then the program's stdout as the program
 * writes it, then one line {@code #peer-end-<token> {"exit": code, "stderr": "<tail of the program's stderr>"}}.
 * The token is the server's first argument (fresh for each server): program output cannot end a reply by accident.
 * Requests are served one at a time, on the main thread. While a program runs, System.in is its "stdin", System.out
 * goes to the reply and System.err is captured (and copied to the server's own stderr, its log); between requests
 * both go to the log. The second argument, idle seconds: the server exits after that long without a request. It
 * also exits when its stdin closes.
 *
 * <p>System.exit: the peers' {@code run} methods return their exit code; mqadmin's {@code ServerUtil.parseCmdLine}
 * calls System.exit on a bad option or -h. A security manager turns an exit during a request into an
 * {@link ExitTrap} thrown at the call (the requested code is the reply's exit). Where the JVM refuses a security
 * manager (JDK 24+), such an exit ends the server: a shutdown hook still sends the reply (exit 1) and the client starts
 * a new server for the next call.
 */
public final class PeerServer {
    private static final int STDERR_TAIL = 64 * 1024;

    private static final PrintStream LOG = System.err;
    private static final OutputStream REPLY =
        new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
    private static final Switch OUT = new Switch(LOG);
    private static final Switch ERR = new Switch(LOG);
    private static final Object REPLY_LOCK = new Object();
    // Not autoflush: the reply is flushed at the end of each request (and whenever its 64 KB buffer fills).
    private static final PrintStream SYS_OUT = new PrintStream(OUT, false, StandardCharsets.UTF_8);
    private static final PrintStream SYS_ERR = new PrintStream(ERR, true, StandardCharsets.UTF_8);

    private static final Thread MAIN_THREAD = Thread.currentThread();  // the class initializes on main
    private static String token;
    private static volatile long lastActive = System.nanoTime();
    private static volatile boolean inRequest;
    private static volatile Integer exitRequested;
    private static volatile boolean replied = true;
    private static Tail stderrTail;
    private static LineEnd replyEnd;

    public static void main(String[] args) throws Exception {
        token = args.length > 0 ? args[0] : "0";
        long idleExitSeconds = args.length > 1 ? Long.parseLong(args[1]) : 0;
        InputStream requests = new FileInputStream(FileDescriptor.in);
        // Before any peer class loads: their static OUT = new PrintStream(System.out) then wraps the switch.
        restoreStreams();
        boolean guarded = trapExits();
        LOG.println("peer server " + ProcessHandle.current().pid() + " ready (System.exit guard: " + guarded + ")");
        LOG.flush();
        Runtime.getRuntime().addShutdownHook(new Thread(PeerServer::replyOnExit, "peer-server-exit"));
        Thread helper = new Thread(PeerServer::hurryClientShutdowns, "peer-server-shutdown-helper");
        helper.setDaemon(true);
        helper.start();
        if (idleExitSeconds > 0) {
            Thread idle = new Thread(() -> exitWhenIdle(idleExitSeconds * 1_000_000_000L), "peer-server-idle");
            idle.setDaemon(true);
            idle.start();
        }

        BufferedReader in = new BufferedReader(new InputStreamReader(requests, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            serve(line);
        }
        LOG.println("peer server: stdin closed, exiting");
        LOG.flush();
        System.exit(0);  // client libraries may leave non-daemon threads behind
    }

    private static void serve(String line) {
        JSONObject request;
        String main;
        String[] args;
        byte[] stdin;
        try {
            request = JSON.parseObject(line);
            main = request.getString("main");
            JSONArray a = request.getJSONArray("args");
            args = a == null ? new String[0] : a.toJavaList(String.class).toArray(new String[0]);
            String s = request.getString("stdin");
            stdin = (s == null ? "" : s).getBytes(StandardCharsets.UTF_8);
        } catch (Throwable t) {
            begin();
            t.printStackTrace(System.err);
            end(1);
            return;
        }
        begin();
        System.setIn(new ByteArrayInputStream(stdin));  // after begin(), which resets it
        long started = System.nanoTime();
        int exit;
        try {
            exit = call(main, args);
        } catch (Throwable t) {
            t.printStackTrace(System.err);
            exit = 1;
        }
        if (exitRequested != null) {
            exit = exitRequested;
        }
        end(exit);
        boolean mqadmin = main != null && main.endsWith("MQAdminStartup");
        LOG.println("peer server: " + (mqadmin && args.length > 0 ? "mqadmin " + args[0] : main) + " exit " + exit
            + " in " + (System.nanoTime() - started) / 1_000_000 + " ms");
    }

    private static int call(String main, String[] args) throws Exception {
        switch (main == null ? "" : main) {
            case "ProducerPeer":
                return ProducerPeer.run(args);
            case "AdminPeer":
                return AdminPeer.run(args);
            case "org.apache.rocketmq.tools.command.MQAdminStartup":
            case "MQAdminStartup":
                // main0 (in 4.9 and 5.x) returns normally; a failing sub-command prints its stack trace and returns.
                org.apache.rocketmq.tools.command.MQAdminStartup.main0(args, null);
                return 0;
            default:
                return callCompiledBeside(main, args);
        }
    }

    /**
     * A peer program compiled into the same class directory from a folder outside the package (the tests' Java
     * oracles, {@code tests/java_peers}): found by its name, run through its {@code static int run(String[])}.
     */
    private static int callCompiledBeside(String main, String[] args) throws Exception {
        java.lang.reflect.Method run;
        try {
            run = Class.forName(main).getDeclaredMethod("run", String[].class);
        } catch (ClassNotFoundException | NoSuchMethodException e) {
            throw new IllegalArgumentException("unknown main " + main + " (not a peer program on this server's classpath)");
        }
        run.setAccessible(true);
        try {
            return (Integer) run.invoke(null, (Object) args);
        } catch (java.lang.reflect.InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception) {
                throw (Exception) cause;
            }
            throw (Error) cause;
        }
    }

    /**
     * A RocketMQ client's shutdown joins its NettyEventExecutor thread, which notices it is stopped only when its
     * {@code eventQueue.poll(3 s)} returns: a close event that arrived before the stop flag leaves the caller waiting
     * up to 3 s (a race, lost far more often in a warm JVM than in a fresh one). When the request thread has been
     * joining such a thread for 100 ms, this interrupts it; its loop catches the interruption and sees it is stopped.
     */
    private static void hurryClientShutdowns() {
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long requestThread = MAIN_THREAD.getId();  // requests run on main
        int lastJoined = 0;
        while (true) {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                return;
            }
            if (!inRequest) {
                lastJoined = 0;
                continue;
            }
            ThreadInfo info = threads.getThreadInfo(requestThread);
            LockInfo lock = info == null ? null : info.getLockInfo();
            if (lock == null || !Thread.class.getName().equals(lock.getClassName())) {
                lastJoined = 0;
                continue;
            }
            int joined = lock.getIdentityHashCode();
            if (joined == lastJoined) {  // the same join on two samples in a row
                for (Thread t : Thread.getAllStackTraces().keySet()) {
                    if (System.identityHashCode(t) == joined && "NettyEventExecutor".equals(t.getName())) {
                        t.interrupt();
                    }
                }
            }
            lastJoined = joined;
        }
    }

    /**
     * Exit after {@code idleNanos} without a request. Under REPLY_LOCK, so no request begins meanwhile: one the
     * server read but never began is one the client sees end without its begin line, and sends to a new server.
     */
    private static void exitWhenIdle(long idleNanos) {
        while (true) {
            try {
                Thread.sleep(Math.max(1000, idleNanos / 10 / 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
            synchronized (REPLY_LOCK) {
                if (!inRequest && System.nanoTime() - lastActive > idleNanos) {
                    LOG.println("peer server: idle for " + idleNanos / 1_000_000_000L + " s, exiting");
                    LOG.flush();
                    Runtime.getRuntime().halt(0);  // no shutdown hooks: nothing is in flight
                }
            }
        }
    }

    /** Point System.out at the reply and System.err at a fresh capture, then tell the client the request started. */
    private static void begin() {
        synchronized (REPLY_LOCK) {
            exitRequested = null;
            stderrTail = new Tail(STDERR_TAIL);
            replyEnd = new LineEnd(REPLY);
            try {
                REPLY.write(("#peer-begin-" + token + "\n").getBytes(StandardCharsets.UTF_8));
                REPLY.flush();
            } catch (Exception e) {
                LOG.println("peer server: cannot write the reply: " + e);
            }
            OUT.target = replyEnd;
            ERR.target = new Tee(stderrTail, LOG);
            restoreStreams();  // in case the previous program replaced them
            replied = false;
            inRequest = true;
            lastActive = System.nanoTime();
        }
    }

    /** Back to the log, then the terminator line. */
    private static void end(int exit) {
        System.out.flush();
        System.err.flush();
        SYS_OUT.flush();
        SYS_ERR.flush();
        synchronized (REPLY_LOCK) {
            if (replied) {
                return;
            }
            inRequest = false;
            OUT.target = LOG;
            ERR.target = LOG;
            Map<String, Object> status = new LinkedHashMap<>();
            status.put("exit", exit);
            status.put("stderr", stderrTail.text());
            try {
                if (!replyEnd.atLineStart) {
                    REPLY.write('\n');
                }
                String last = "#peer-end-" + token + " " + JSON.toJSONString(status) + "\n";
                REPLY.write(last.getBytes(StandardCharsets.UTF_8));
                REPLY.flush();
            } catch (Exception e) {
                LOG.println("peer server: cannot write the reply: " + e);
            }
            replied = true;
            lastActive = System.nanoTime();
            restoreStreams();
        }
    }

    private static void restoreStreams() {
        System.setOut(SYS_OUT);
        System.setErr(SYS_ERR);
        System.setIn(new ByteArrayInputStream(new byte[0]));
    }

    /** Shutdown hook: a program ended the JVM in the middle of a request (no exit guard); still answer it. */
    private static void replyOnExit() {
        if (!replied) {
            System.err.println("peer server: the JVM is exiting during the request (System.exit without the guard, "
                + "or a signal)");
            end(exitRequested != null ? exitRequested : 1);
        }
        LOG.flush();
    }

    /**
     * A security manager that allows everything but System.exit during a request. The common pool is created first:
     * created under a security manager it would use threads without permissions or context class loader.
     */
    @SuppressWarnings({"removal", "deprecation"})
    private static boolean trapExits() {
        ForkJoinPool.commonPool();
        try {
            System.setSecurityManager(new SecurityManager() {
                @Override
                public void checkPermission(Permission perm) {
                }

                @Override
                public void checkPermission(Permission perm, Object context) {
                }

                @Override
                public void checkExit(int status) {
                    if (inRequest) {
                        exitRequested = status;
                        throw new ExitTrap(status);
                    }
                }
            });
            return true;
        } catch (UnsupportedOperationException | SecurityException e) {
            LOG.println("peer server: no security manager (" + e + "); a System.exit in a request ends the server");
            return false;
        }
    }

    /** What System.exit throws during a request; its name ends in neither Exception nor Error (see mqadmin.py). */
    static final class ExitTrap extends SecurityException {
        ExitTrap(int status) {
            super("System.exit(" + status + ") trapped by the peer server");
        }
    }

    /** An output stream whose destination changes between requests. */
    static final class Switch extends OutputStream {
        volatile OutputStream target;

        Switch(OutputStream target) {
            this.target = target;
        }

        @Override
        public void write(int b) throws java.io.IOException {
            synchronized (REPLY_LOCK) {
                target.write(b);
            }
        }

        @Override
        public void write(byte[] b, int off, int len) throws java.io.IOException {
            synchronized (REPLY_LOCK) {
                target.write(b, off, len);
            }
        }

        @Override
        public void flush() throws java.io.IOException {
            synchronized (REPLY_LOCK) {
                target.flush();
            }
        }

        @Override
        public void close() throws java.io.IOException {
            flush();  // a program closing System.out must not close the reply
        }
    }

    /** The reply stream, remembering whether the program's output ended with a newline. */
    static final class LineEnd extends OutputStream {
        private final OutputStream out;
        boolean atLineStart = true;

        LineEnd(OutputStream out) {
            this.out = out;
        }

        @Override
        public void write(int b) throws java.io.IOException {
            out.write(b);
            atLineStart = b == '\n';
        }

        @Override
        public void write(byte[] b, int off, int len) throws java.io.IOException {
            if (len > 0) {
                out.write(b, off, len);
                atLineStart = b[off + len - 1] == '\n';
            }
        }

        @Override
        public void flush() throws java.io.IOException {
            out.flush();
        }
    }

    /** The last {@code limit} bytes written. */
    static final class Tail extends OutputStream {
        private final byte[] ring;
        private long written;

        Tail(int limit) {
            ring = new byte[limit];
        }

        @Override
        public void write(int b) {
            ring[(int) (written++ % ring.length)] = (byte) b;
        }

        String text() {
            int n = (int) Math.min(written, ring.length);
            byte[] out = new byte[n];
            int start = (int) ((written - n) % ring.length);
            for (int i = 0; i < n; i++) {
                out[i] = ring[(start + i) % ring.length];
            }
            return new String(out, StandardCharsets.UTF_8);
        }
    }

    /** Both streams. */
    static final class Tee extends OutputStream {
        private final OutputStream a;
        private final OutputStream b;

        Tee(OutputStream a, OutputStream b) {
            this.a = a;
            this.b = b;
        }

        @Override
        public void write(int x) throws java.io.IOException {
            a.write(x);
            b.write(x);
        }

        @Override
        public void write(byte[] buf, int off, int len) throws java.io.IOException {
            a.write(buf, off, len);
            b.write(buf, off, len);
        }

        @Override
        public void flush() throws java.io.IOException {
            a.flush();
            b.flush();
        }
    }
}
