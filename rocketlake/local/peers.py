"""Java programs built against the official RocketMQ client: the independent peer.

Our tests, demo and benchmarks judge the Python client against what the Java client does on the
same broker. The sources ship beside this module and are compiled together on first use with ``javac``
against the cached RocketMQ jars; the classes are cached by a hash of all the sources and the version.

A JVM start costs seconds, and the suites ask the peers (and mqadmin, see mqadmin.py) dozens of times, so
the calls go to one long-lived ``PeerServer`` JVM per (RocketMQ version, state directory): it runs each
program's ``run(args)`` (or ``MQAdminStartup.main0``) with System.in/out/err swapped for the request's.
The protocol is in PeerServer.java. The package ships the producer and the admin peer (the demo, the local runtime);
the tests' oracles (a consumer, the allocation strategies, push consumers) are in ``tests/java_peers``, compiled
with them once a test registers that folder (``add_sources``).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rocketlake import jars
from rocketlake.local.process import TOOL_HEAP, LocalClusterError, jvm_base_flags

SOURCES = Path(__file__).parent / "peers"
#: Folders of Java programs compiled with the package's own (``add_sources``): the tests' oracles, which the wheel
#: does not ship (``tests/java_peers``).
_extra_sources: list[Path] = []
SERVER_MAIN = "PeerServer"
#: The server exits after this long without a request (the next call starts a new one): a state directory
#: nobody asks any more does not keep a JVM.
SERVER_IDLE_EXIT_S = 300


@dataclass(frozen=True)
class SentMessage:
    """What the broker answered the Java producer for one message."""

    index: int
    topic: str
    msg_id: str
    offset_msg_id: str | None
    broker_name: str
    queue_id: int
    queue_offset: int
    status: str

    @classmethod
    def from_dict(cls, d: dict) -> "SentMessage":
        return cls(
            d["index"],
            d["topic"],
            d["msgId"],
            d.get("offsetMsgId"),
            d["brokerName"],
            d["queueId"],
            d["queueOffset"],
            d["status"],
        )


def add_sources(folder: Path) -> None:
    """Compile the Java programs of ``folder`` with the package's own from now on (a peer server started before
    starts again with them at its next call)."""
    folder = Path(folder).resolve()
    if folder not in _extra_sources:
        _extra_sources.append(folder)


def source_folders() -> tuple[Path, ...]:
    return (SOURCES, *_extra_sources)


def build(program: str = SERVER_MAIN, version: str = jars.ROCKETMQ_VERSION) -> str:
    """Compile every ``*.java`` beside this module (and of the folders ``add_sources`` named) into one class
    directory, once per sources and version (the server calls the peers, so they compile together); return the
    classpath to run ``program``."""
    folders = source_folders()
    sources = [source for folder in folders for source in sorted(folder.glob("*.java"))]
    if not any((folder / f"{program}.java").exists() for folder in folders):
        raise LocalClusterError(f"no Java peer program {program} in {', '.join(map(str, folders))}")
    lib_cp = jars.classpath(jars.rocketmq_jar_set(version))
    digest = hashlib.sha256(version.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    out = jars.cache_dir() / "peers" / f"peers-{version}-{digest.hexdigest()[:16]}"
    if not (out / f"{program}.class").exists():
        javac = jars.require_tool("javac", "compile the Java peer programs")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
        proc = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-cp", lib_cp, "-d", str(tmp), *map(str, sources)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise LocalClusterError(f"javac failed on {', '.join(map(str, folders))}:\n{proc.stderr[-3000:]}")
        try:
            tmp.rename(out)
        except OSError:  # another process built the same sources meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    return f"{out}:{lib_cp}"


def ipv6_marker(state_dir: Path) -> Path:
    """Present while the cluster of ``state_dir`` listens on ::1 (``LocalCluster.up`` keeps it): its peers' JVM
    must not be IPv4 only. Elsewhere they stay so, as the servers do: a JVM with both stacks takes an IPv6
    address for the messages' unique keys (MessageClientIDSetter) on a machine without a non-loopback IPv4."""
    return state_dir / "ipv6"


def tls_marker(state_dir: Path) -> Path:
    """Present while the cluster of ``state_dir`` enforces TLS (``LocalCluster.up`` keeps it): its peers speak TLS."""
    return state_dir / "tls" / "enforced"


def tls_client_flags(state_dir: Path) -> list[str]:
    """The Java client's TLS switches (TlsSystemConfig: JVM properties only) for the cluster of ``state_dir``: TLS on,
    the local CA trusted, the local client certificate offered to servers that ask for one; none for a plain one."""
    if not tls_marker(state_dir).exists():
        return []
    folder = state_dir / "tls"
    return [
        "-Dtls.enable=true",
        "-Dtls.test.mode.enable=false",
        "-Dtls.client.authServer=true",
        f"-Dtls.client.trustCertPath={folder / 'ca.pem'}",
        f"-Dtls.client.certPath={folder / 'client.pem'}",
        f"-Dtls.client.keyPath={folder / 'client.key'}",
    ]


def java_command(program: str, state_dir: Path, args: list[str], version: str = jars.ROCKETMQ_VERSION) -> list[str]:
    """A JVM of its own for ``program`` (the push consumers, which live as long as a test needs them)."""
    java = jars.require_tool("java", "run the Java peer programs")
    logs = state_dir / "logs" / "peers"
    return [
        java,
        *TOOL_HEAP,
        f"-Drocketmq.client.logRoot={logs}",
        "-Drocketmq.client.logUseSlf4j=false",
        f"-Duser.home={state_dir}",
        "-Drmq.logback.configurationFile=rmq.client.logback.xml",
        f"-Drocketmq.home.dir={state_dir / 'home'}",
        *tls_client_flags(state_dir),
        "-cp",
        build(program, version),
        program,
        *args,
    ]


def server_command(state_dir: Path, version: str, token: str) -> list[str]:
    """The PeerServer JVM: the union of the peers' flags (java_command) and mqadmin's (``jvm_base_flags``, the
    tools' logback configuration, ``rocketmq.home.dir`` where 4.9's tools read conf/logback_tools.xml)."""
    java = jars.require_tool("java", "run the Java peer programs")
    logs = state_dir / "logs" / "peers"
    feature = _java_feature_version(java)
    # JDK 18-23 refuse System.setSecurityManager (the server's System.exit guard) unless allowed; 17 allows it,
    # 24+ has none (the server then runs unguarded, see PeerServer.java).
    allow_sm = ["-Djava.security.manager=allow"] if feature is not None and 18 <= feature < 24 else []
    return [
        java,
        *TOOL_HEAP,
        *jvm_base_flags(
            state_dir, state_dir / "home", "rmq.tools.logback.xml", ipv4_only=not ipv6_marker(state_dir).exists()
        ),
        f"-Drocketmq.client.logRoot={logs}",
        "-Drocketmq.client.logUseSlf4j=false",
        "-Dfile.encoding=UTF-8",
        "-XX:+DisplayVMOutputToStderr",
        *allow_sm,
        *tls_client_flags(state_dir),
        "-cp",
        build(SERVER_MAIN, version),
        SERVER_MAIN,
        token,
        str(SERVER_IDLE_EXIT_S),
    ]


@lru_cache(maxsize=None)
def _java_feature_version(java: str) -> int | None:
    """17 for a JDK 17, from the ``release`` file of the JDK ``java`` belongs to; None if unknown."""
    release = Path(os.path.realpath(java)).parent.parent / "release"
    try:
        for line in release.read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                number = line.split("=", 1)[1].strip('"').split(".")[0]
                return int(number)
    except (OSError, ValueError):
        pass
    return None


class PeerServer:
    """One PeerServer JVM for (``version``, ``state_dir``): started on first use, started again when it died,
    one request at a time (a lock: callers may be threads). Its stderr (and the programs' stderr) goes to
    ``state_dir/logs/peers/peer-server-<version>.log``."""

    def __init__(self, state_dir: Path, version: str):
        self.state_dir = state_dir
        self.version = version
        self.starts = 0  # JVMs started so far
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._lines: queue.SimpleQueue | None = None
        self._token = ""
        self._folders: tuple[Path, ...] = ()  # the source folders of the running server's classes

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "peers" / f"peer-server-{self.version}.log"

    @property
    def pid(self) -> int | None:
        """The running server's pid, None when there is none (not started yet, exited or killed)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def call(self, main: str, args: list[str], stdin: str = "", *, timeout: float = 300.0) -> tuple[int, str, str]:
        """Run ``main`` (a peer class, or mqadmin's ``org.apache.rocketmq.tools.command.MQAdminStartup``) with
        ``args`` and ``stdin``; return (exit code, its stdout, the tail of its stderr). A call that outlives
        ``timeout`` kills the server and raises subprocess.TimeoutExpired, as subprocess.run did."""
        request = (json.dumps({"main": main, "args": list(args), "stdin": stdin}) + "\n").encode()
        with self._lock:
            for _ in range(2):
                proc, lines, token = self._running()
                reply = self._exchange(proc, lines, token, request, [main, *args], timeout)
                if reply is not None:
                    return reply
                # The server ended before it read the request (killed, or it exited idle): a new one, once.
            raise LocalClusterError(
                f"the Java peer server for {self.state_dir} ends before it reads a request; "
                f"its log ({self.log_file}) ends with:\n{self._log_tail()}"
            )

    def close(self, timeout: float = 10.0) -> None:
        """End the server (it exits when its stdin closes); the next call starts a new one."""
        proc, self._proc, self._lines = self._proc, None, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- internals -------------------------------------------------------------------------------
    def _running(self) -> tuple[subprocess.Popen, queue.SimpleQueue, str]:
        if self._proc is not None and self._proc.poll() is None and self._folders == source_folders():
            return self._proc, self._lines, self._token
        self.close()  # reap a dead one, or end one compiled without programs added since
        self._folders = source_folders()
        token = secrets.token_hex(8)
        cmd = server_command(self.state_dir, self.version, token)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(cmd)}\n".encode())
            log.flush()
            # In the state directory: mqadmin consumerStatus -i writes its answer to ./<timestamp>/ there,
            # not into the directory rocketlake was started from.
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=self.state_dir)
        lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(
            target=_pump, args=(proc.stdout, lines), daemon=True, name=f"peer-server-{proc.pid}-stdout"
        ).start()
        self._proc, self._lines, self._token = proc, lines, token
        self.starts += 1
        return proc, lines, token

    def _exchange(
        self,
        proc: subprocess.Popen,
        lines: queue.SimpleQueue,
        token: str,
        request: bytes,
        what: list[str],
        timeout: float,
    ) -> tuple[int, str, str] | None:
        """One request; None when the server died before it read it (nothing ran)."""
        deadline = time.monotonic() + timeout
        begin, end = f"#peer-begin-{token}\n".encode(), f"#peer-end-{token} ".encode()
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
        except OSError:  # BrokenPipeError: it is gone
            self.close()
            return None
        begun = False
        out: list[bytes] = []
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()  # a wedged program would block every later request: start afresh next time
                self.close()
                raise subprocess.TimeoutExpired(what, timeout, output=b"".join(out)) from None
            if line is None:  # end of its stdout: the JVM is gone
                code = proc.wait()
                self.close()
                if not begun:
                    return None
                raise LocalClusterError(
                    f"the Java peer server died (exit {code}) while running {' '.join(what)[:200]}; its log "
                    f"({self.log_file}) ends with:\n{self._log_tail()}"
                )
            if not begun:
                begun = line == begin  # anything before the request's begin line is not the program's
                continue
            if line.startswith(end):
                status = json.loads(line[len(end) :])
                return status["exit"], b"".join(out).decode("utf-8", errors="replace"), status["stderr"]
            out.append(line)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])


def _pump(stream, lines: queue.SimpleQueue) -> None:
    """The server's stdout, line by line, then None at its end."""
    try:
        with stream:
            for line in iter(stream.readline, b""):
                lines.put(line)
    finally:
        lines.put(None)


_servers: dict[tuple[str, Path], PeerServer] = {}
_servers_lock = threading.Lock()


def server(state_dir: Path, version: str = jars.ROCKETMQ_VERSION) -> PeerServer:
    """The PeerServer of (``version``, ``state_dir``), one per process (it starts on its first call)."""
    key = (version, Path(state_dir).resolve())
    with _servers_lock:
        found = _servers.get(key)
        if found is None:
            found = _servers[key] = PeerServer(key[1], version)
        return found


def close_servers(state_dir: Path | None = None, timeout: float = 10.0) -> None:
    """End the servers of ``state_dir`` (every version), or all of them, each given ``timeout`` seconds to exit;
    LocalCluster.down and exit call it."""
    wanted = None if state_dir is None else Path(state_dir).resolve()
    with _servers_lock:
        chosen = [s for (_, d), s in _servers.items() if wanted is None or d == wanted]
    for s in chosen:
        s.close(timeout)


atexit.register(close_servers)


def run_peer(
    program: str,
    state_dir: Path,
    args: list[str],
    stdin: str = "",
    *,
    version: str = jars.ROCKETMQ_VERSION,
    timeout: float = 300.0,
) -> list[dict]:
    """Run a peer program (on the state directory's PeerServer); its JSON output lines come back parsed."""
    code, stdout, stderr = server(state_dir, version).call(program, args, stdin, timeout=timeout)
    if code != 0:
        raise LocalClusterError(f"the Java peer {program} failed (exit {code}):\n{stderr[-3000:]}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def produce(
    namesrv: str,
    state_dir: Path,
    messages: list[dict] | None = None,
    *,
    args: list[str] = (),
    version: str = jars.ROCKETMQ_VERSION,
    timeout: float = 300.0,
) -> list[SentMessage]:
    """Send with the Java producer of ``version``; ``messages`` are the JSON lines of its stdin mode. It returns
    once a consumer can pull what it sent (the producer waits, 10 s at most, for the brokers' dispatch), delayed
    and transactional messages excepted: they reach their topic later."""
    stdin = "".join(json.dumps(m) + "\n" for m in messages or [])
    lines = run_peer("ProducerPeer", state_dir, ["--namesrv", namesrv, *args], stdin, version=version, timeout=timeout)
    return [SentMessage.from_dict(d) for d in lines]


def admin(namesrv: str, state_dir: Path, commands: list[dict], *, version: str = jars.ROCKETMQ_VERSION) -> list[dict]:
    """Ask the Java admin API (DefaultMQAdminExt); one answer {"ok", "value" | "error"} per command."""
    stdin = "".join(json.dumps(c) + "\n" for c in commands)
    return run_peer("AdminPeer", state_dir, ["--namesrv", namesrv], stdin, version=version)
