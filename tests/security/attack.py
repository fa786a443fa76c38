#!/usr/bin/env python3
"""attack.py - multi-process attack tests of xcoll's startup and store
(docs/security.md). Each mode runs a real job and an attacker, and exits 0
only when the job behaved as it must:

  stranger  a 4-rank job under xcollrun (with its generated secret) runs
            xcoll-perf while a stranger without the secret keeps connecting to
            the store: offers without a secret, a store SET, garbage,
            connect+close. The job must finish with correct results.
  scan      rank 3 of 4 starts late; meanwhile every listening port of the
            other ranks (the store and the tcp startup listeners, found in
            /proc) gets a connect+close, garbage and crafted HELLOs with
            negative and huge fields. The job must finish with correct results.
  dying     ranks 0-2 of a 4-rank world start; rank 2 is killed (SIGKILL)
            once it listens; ranks 0 and 1 must fail within a few seconds
            naming rank 2, long before XCOLL_TIMEOUT_S.
  worldsize two ranks disagree on WORLD_SIZE: one of them fails at once
            naming both values.
  duprank   two processes say RANK=1: the second fails at once naming the
            first one's address.
  orphans   xcollrun is killed with SIGKILL while its 2 ranks run: the ranks
            must be gone within seconds (PR_SET_PDEATHSIG), not left behind.
  bind      the store of a job with MASTER_ADDR=127.0.0.1 listens on
            127.0.0.1 only, and on every interface with XCOLL_STORE_BIND=0.0.0.0
            (read from /proc/net/tcp and tcp6; "::" counts as every
            interface).
  crowd KIND N
            a 4-rank job whose rank 3 starts only once a stranger holds N idle
            connections (as many as the backlog takes) on every startup
            listener of ranks 0-2, found as a stranger finds them; the
            stranger keeps topping them up to N, on every listener of all
            ranks, until the job ends. KIND: unix (nccl_like's socket net
            plugin, abstract names @xcoll-net-socket-* from /proc/net/unix),
            tcpnet (the same plugin with XCOLL_SOCKET_UNIX=0, ports from
            /proc/net/tcp), mesh (the tcp backend's startup listener), store
            (the rendezvous store on rank 0: every rank's first connect, to
            the store, waits until the stranger holds N connections there).
            The job must finish with correct results, well within
            XCOLL_TIMEOUT_S, and warn about dropped connections at most
            once a second per listener.
  flood KIND
            the same, but the stranger holds 70 idle connections per
            listener and meanwhile connects and closes in a loop (on the
            store, each of those sends 69 bytes of garbage first: a wrong
            first message, which the store drops).

usage: attack.py MODE BUILD_DIR [KIND [N]]"""
import errno
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

MODE, BUILD = sys.argv[1], sys.argv[2]
ARGS = sys.argv[3:]
XCOLLRUN = os.path.join(BUILD, "tools", "xcollrun")
PERF = os.path.join(BUILD, "tools", "xcoll-perf")
HOLD_LISTEN = os.path.join(BUILD, "tests", "libxcoll_hold_listen.so")
# Bound every wait: a busy 2-core machine is slow, a hung job is a failure.
LIMIT_S = 150


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fnv1a(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def hello(comm_id, to_rank, index, sender, kind=3, length=0):
    """A wire header (core/wire.h) with a valid checksum."""
    body = struct.pack("<IHHQQQI", 0x4D574358, 1, kind, comm_id,
                       (to_rank << 32) | index, length, sender)
    return body + struct.pack("<I", fnv1a(body))


OFFER_NO_SECRET = b"XCA1" + b"\x00" + os.urandom(32)
OFFER_FAKE_SECRET = b"XCA1" + b"\x01" + os.urandom(32)
STORE_SET = struct.pack(">IHHII", 0x58435354, 1, 1, 5, 5) + b"tcp/xhello"


def poke(port, payload, wait_s=0.5):
    """Connect, send payload, read what comes back (a rejected stranger gets
    at most an offer), close. Returns the bytes received or None."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return None
    got = b""
    try:
        if payload:
            s.sendall(payload)
        s.settimeout(wait_s)
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    s.close()
    return got


def crafted_payloads():
    out = [b"", os.urandom(64), b"GET / HTTP/1.0\r\n\r\n"]
    for fields in [(0, 1, 0, 0xFFFFFFFF), (0, 1, 0xFFFFFFFF, 0),
                   (0, 0xFFFFFFFF, 0, 0), (0, 1, 0x7FFFFFFF, 0x80000000),
                   (12345, 1, 0, 0)]:
        out.append(hello(*fields) + OFFER_NO_SECRET)
        out.append(hello(*fields) + OFFER_FAKE_SECRET + os.urandom(32))
    out.append(OFFER_NO_SECRET + STORE_SET)
    out.append(OFFER_FAKE_SECRET + os.urandom(32) + STORE_SET)
    return out


def listening_ports(pids):
    """TCP ports in LISTEN state owned by pids (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].split(":")[1], 16))
    return ports


def check_perf_output(out):
    if "Out of bounds values : 0 OK" not in out:
        fail("the job's results were wrong or missing:\n" + out[-3000:])


def child_pids(pid):
    try:
        return [int(p) for p in
                open("/proc/%d/task/%d/children" % (pid, pid)).read().split()]
    except OSError:
        return []


def family(pid):
    """pid and all its descendants: a rank is xcollrun's grandchild (under
    its keeper), a wrapper's program one level further down."""
    pids = [pid]
    for child in child_pids(pid):
        pids += family(child)
    return pids


def run_job_with_attacker(env, attack, late_rank=None, iters=20):
    port = free_port()
    prog = [PERF, "-b", "8", "-e", "64K", "-f", "4", "-n", str(iters)]
    if late_rank is not None:
        # The late rank's start is held back so that the others sit in their
        # startup with listeners open; not synchronisation, only a window.
        prog = ["sh", "-c", 'if [ "$RANK" = %d ]; then sleep 4; fi; exec "$@"'
                % late_rank, "sh"] + prog
    job = subprocess.Popen([XCOLLRUN, "--nproc-per-node", "4", "--master-port",
                            str(port)] + prog, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    hits = attack(job, port)
    try:
        out, _ = job.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        job.kill()
        fail("the job did not finish in %d s" % LIMIT_S)
    print(out[-4000:])
    if job.returncode != 0:
        fail("the job failed (exit %d) under attack" % job.returncode)
    check_perf_output(out)
    return hits, out


def mode_stranger():
    env = dict(os.environ, XCOLL_BACKEND="tcp", XCOLL_TIMEOUT_S="120")
    env.pop("XCOLL_AUTH_TOKEN", None)
    env.pop("XCOLL_AUTH_FILE", None)

    def attack(job, port):
        hits = 0
        start = time.time()
        while job.poll() is None and time.time() - start < LIMIT_S:
            for payload in crafted_payloads():
                got = poke(port, payload, wait_s=0.2)
                if got is not None:
                    hits += 1
                    # never a store reply: at most the server's offer
                    if len(got) > 69:
                        fail("the store answered a stranger with %d bytes"
                             % len(got))
        return hits

    # enough iterations that the job is still running while it is attacked,
    # and while the store judges and drops the stranger's connections (at
    # 300 the job could end, in 0.4 s, before the first drop was logged)
    hits, out = run_job_with_attacker(env, attack, iters=3000)
    if hits == 0:
        fail("the stranger never reached the store")
    if "rendezvous store: closing the connection from" not in out:
        fail("no WARN naming the rejected stranger")
    print("stranger: %d connections to the store rejected, job correct" % hits)


def mode_scan():
    env = dict(os.environ, XCOLL_BACKEND="tcp", XCOLL_TIMEOUT_S="120")

    def attack(job, port):
        attacked = set()
        start = time.time()
        while job.poll() is None and time.time() - start < LIMIT_S:
            pids = child_pids(job.pid)
            ports = set()
            for pid in pids:
                ports |= listening_ports(family(pid))
            for p in ports:
                for payload in crafted_payloads():
                    poke(p, payload, wait_s=0.05)
                attacked.add(p)
            if len(attacked - {port}) >= 3:
                break
        return attacked - {port}

    rank_listeners, out = run_job_with_attacker(env, attack, late_rank=3)
    if not rank_listeners:
        fail("the scan found no rank listener to attack")
    if "drops the connection from" not in out:
        fail("no WARN naming a rejected connection to a rank listener")
    print("scan: store and %d rank listener(s) attacked, job correct"
          % len(rank_listeners))


def start_rank(rank, world_size, port, extra=None):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               XCOLL_BACKEND="tcp", XCOLL_TIMEOUT_S="120",
               XCOLL_AUTH_TOKEN="attack-test-secret", XCOLL_DEBUG="INFO")
    env.update(extra or {})
    proc = subprocess.Popen([PERF, "-b", "8", "-e", "8", "-n", "5"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.seen = ""
    return proc


def wait_line(proc, needle, limit_s):
    """Read proc's output until a line contains needle; returns the text."""
    text = ""
    deadline = time.time() + limit_s
    fd = proc.stdout.fileno()
    while time.time() < deadline:
        import select
        ready, _, _ = select.select([fd], [], [], 0.5)
        chunk = os.read(fd, 65536) if ready else b""
        if chunk:
            text += chunk.decode(errors="replace")
            if needle in text:
                proc.seen += text
                return text
        elif ready or proc.poll() is not None:
            break
    fail("no line with %r within %d s:\n%s" % (needle, limit_s, text[-2000:]))


def finish(proc, limit_s):
    """Wait for proc (bounded); returns (exit code, remaining output)."""
    try:
        out, _ = proc.communicate(timeout=limit_s)
        return proc.returncode, proc.seen + out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return None, proc.seen + out.decode(errors="replace")


def mode_dying():
    port = free_port()
    survivors = [start_rank(0, 4, port), start_rank(1, 4, port)]
    victim = start_rank(2, 4, port)
    # every started rank has joined and published its address (rank 3 never
    # comes, so they all wait in their startup)
    for r, proc in enumerate(survivors + [victim]):
        wait_line(proc, "rank %d listens on" % r, 60)
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    victim.wait()
    for r, proc in enumerate(survivors):
        code, out = finish(proc, 60)
        took = time.time() - killed_at
        print(out[-1500:])
        if code is None or code == 0:
            fail("rank %d did not fail within 60 s of rank 2's death" % r)
        if "rank 2" not in out or "died or was killed" not in out:
            fail("rank %d's error does not name the dead rank 2" % r)
        print("dying: rank %d failed %.2f s after rank 2 was killed" % (r, took))
        if took > 20:
            fail("rank %d took %.1f s (XCOLL_TIMEOUT_S is 120)" % (r, took))


def mode_worldsize():
    port = free_port()
    a = start_rank(0, 2, port)
    b = start_rank(1, 3, port)
    start = time.time()
    outputs = []
    for proc in (b, a):
        code, out = finish(proc, 30 if proc is b else 5)
        outputs.append(out)
    text = "\n".join(outputs)
    print(text[-3000:])
    if "says WORLD_SIZE=" not in text:
        fail("no rank named the WORLD_SIZE disagreement")
    if time.time() - start > 40:
        fail("the WORLD_SIZE mismatch took %.1f s" % (time.time() - start))
    print("worldsize: mismatch reported after %.2f s" % (time.time() - start))


def mode_duprank():
    port = free_port()
    first = [start_rank(0, 3, port), start_rank(1, 3, port)]
    wait_line(first[1], "rank 1 listens on", 60)
    dup = start_rank(1, 3, port)
    start = time.time()
    code, out = finish(dup, 30)
    print(out[-2000:])
    if code in (None, 0) or "already registered" not in out:
        fail("the second RANK=1 was not refused at once")
    took = time.time() - start
    # the first rank 1 is unharmed: it still waits for rank 2, alive
    if first[1].poll() is not None:
        fail("the registered rank 1 was harmed by the duplicate")
    for proc in first:
        proc.kill()
        proc.communicate()
    print("duprank: duplicate refused after %.2f s, first rank 1 unharmed"
          % took)


def alive(pid):
    """True while pid runs (a zombie waiting for its reaper is dead)."""
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    except OSError:
        return False
    return False


def mode_orphans():
    job = subprocess.Popen([XCOLLRUN, "--nproc-per-node", "2", "--master-port",
                            "0", "sh", "-c", "echo pid $$; exec sleep 1000"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    job.seen = ""
    text = wait_line(job, "pid", 60)
    deadline = time.time() + 60
    while text.count("pid ") < 2 and time.time() < deadline:
        text += wait_line(job, "pid", 60)
    pids = [int(w.split()[1]) for w in text.splitlines() if "pid " in w
            for w in [w[w.index("pid "):]]]
    if len(pids) != 2:
        fail("expected 2 rank pids, got %r" % text)
    job.send_signal(signal.SIGKILL)
    job.wait()
    killed_at = time.time()
    while any(alive(p) for p in pids) and time.time() - killed_at < 20:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    if left:
        fail("ranks %r outlived xcollrun by 20 s" % left)
    print("orphans: both ranks gone %.2f s after xcollrun was killed"
          % (time.time() - killed_at))


def listen_address(pid, port):
    """The local IPv4 address (dotted) pid's socket listening on port is
    bound to, from /proc/net/tcp; None if there is none."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            addr, hexport = f[1].split(":")
            if f[3] != "0A" or f[9] not in inodes or int(hexport, 16) != port:
                continue
            if len(addr) == 8:
                return socket.inet_ntoa(struct.pack("<I", int(addr, 16)))
            # IPv6: four little-endian 32-bit words
            raw = b"".join(struct.pack("<I", int(addr[i:i + 8], 16))
                           for i in range(0, 32, 8))
            text = socket.inet_ntop(socket.AF_INET6, raw)
            return "0.0.0.0" if text == "::" else text
    return None


def mode_bind():
    for extra, want in (({}, "127.0.0.1"),
                        ({"XCOLL_STORE_BIND": "0.0.0.0"}, "0.0.0.0")):
        port = free_port()
        # rank 1 of 2 never comes: rank 0 waits in its startup, store up
        proc = start_rank(0, 2, port, extra)
        wait_line(proc, "rank 0 listens on", 60)
        got = listen_address(proc.pid, port)
        proc.kill()
        finish(proc, 10)
        print("bind %r: the store listens on %s:%d" % (extra, got, port))
        if got != want:
            fail("with %r the store listens on %s, not %s" % (extra, got, want))


def socket_inodes(pids):
    """Inodes of the sockets pids hold open (from /proc/PID/fd)."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def unix_listener_names(pids):
    """Abstract Unix-domain names of the socket net plugin's listeners held
    by pids, as anyone reads them in /proc/net/unix ("@xcoll-net-socket-*",
    flag __SO_ACCEPTCON = listening)."""
    inodes = socket_inodes(pids)
    names = set()
    try:
        lines = open("/proc/net/unix").read().splitlines()[1:]
    except OSError:
        return names
    for line in lines:
        f = line.split()
        if (len(f) >= 8 and f[7].startswith("@xcoll-net-socket-")
                and int(f[3], 16) & 0x10000 and f[6] in inodes):
            names.add(f[7])
    return names


class Crowd:
    """A stranger's idle connections, per target: ("unix", "@name") or
    ("tcp", port). Non-blocking connects: a full backlog refuses (Unix) or
    leaves the connect pending (TCP); either way the stranger goes on."""

    def __init__(self, per_target):
        self.per_target = per_target
        self.held = {}    # target -> list of sockets
        self.opened = 0   # connections the listeners took
        self.lost = 0     # of them, closed by a listener

    def _open(self, target):
        kind, where = target
        fam = socket.AF_UNIX if kind == "unix" else socket.AF_INET
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError:  # the stranger's own descriptors ran out
            return None
        s.setblocking(False)
        addr = "\0" + where[1:] if kind == "unix" else ("127.0.0.1", where)
        try:
            s.connect(addr)
        except (BlockingIOError, InterruptedError):
            if kind == "unix":  # EAGAIN: the backlog is full
                s.close()
                return None
        except OSError:
            s.close()
            return None
        return s

    def prune(self):
        """Forget connections a listener closed (readable: EOF or RST)."""
        for target, socks in self.held.items():
            keep = []
            for s in socks:
                try:
                    got = s.recv(1, socket.MSG_PEEK)
                    closed = got == b""
                except (BlockingIOError, InterruptedError):
                    closed = False
                except OSError as e:
                    closed = e.errno not in (errno.ENOTCONN,)
                if closed:
                    s.close()
                    self.lost += 1
                else:
                    keep.append(s)
            self.held[target] = keep

    def fill(self, targets, deadline):
        """Top every target up to per_target connections (until one is
        refused or deadline)."""
        for target in targets:
            socks = self.held.setdefault(target, [])
            while len(socks) < self.per_target and time.time() < deadline:
                s = self._open(target)
                if s is None:
                    break
                socks.append(s)
                self.opened += 1

    def knock(self, targets, payload=None):
        """One connect+close on every target (the flood), sending payload
        first when given (and the connect has completed)."""
        for target in targets:
            s = self._open(target)
            if s is not None:
                if payload:
                    try:
                        s.send(payload)
                    except OSError:
                        pass
                s.close()
                self.opened += 1

    def close(self):
        for socks in self.held.values():
            for s in socks:
                s.close()
        self.held = {}


def startup_targets(kind, pids, store_port):
    if kind == "store":
        return [("tcp", store_port)] if store_port in listening_ports(pids) \
            else []
    if kind == "unix":
        return [("unix", n) for n in sorted(unix_listener_names(pids))]
    return [("tcp", p) for p in sorted(listening_ports(pids))
            if p != store_port]


def check_drop_warnings(out, took_s):
    """At most one WARN about dropped connections a second per listener
    (plus the closing count): strangers do not decide how much a rank
    warns."""
    per_listener = {}
    for line in out.splitlines():
        if " WARN " not in line or " more unauthenticated" in line:
            continue
        m = re.search(r"rank (\d+) dropped a connection from .* to "
                      r"(\d+\.\d+\.\d+\.\d+:\d+):",
                      line) or re.search(r"tcp: rank (\d+) drops ", line) \
            or re.search(r"(rendezvous store): closing the connection", line)
        if m:
            key = m.groups()
            per_listener[key] = per_listener.get(key, 0) + 1
    worst = max(per_listener.values()) if per_listener else 0
    print("drop WARNs: %d lines over %d listener(s), at most %d for one, "
          "in %.1f s" % (sum(per_listener.values()), len(per_listener),
                         worst, took_s))
    if worst > took_s + 2:
        fail("a listener warned %d times about dropped connections in %.1f s"
             % (worst, took_s))


def crowd_job(kind, per_target, flood):
    """A 4-rank job attacked by a Crowd during its startup (see crowd)."""
    timeout_s = 30
    env = dict(os.environ, XCOLL_TIMEOUT_S=str(timeout_s))
    env["XCOLL_BACKEND"] = "tcp" if kind in ("mesh", "store") else "nccl_like"
    if kind not in ("mesh", "store"):
        env["XCOLL_NET"] = "socket"
        # The ring's channels over the plugin too (between ranks of one
        # host they would be shared memory, which listens elsewhere).
        env["XCOLL_SHM_DISABLE"] = "1"
    if kind == "tcpnet":
        env["XCOLL_SOCKET_UNIX"] = "0"
    ready = "/tmp/xcoll_attack_ready_%d_%d" % (os.getpid(), time.time_ns())
    port = free_port()
    # Rank 3 waits at its first listen() until the stranger is in place
    # (hold_listen.c), so that ranks 0-2 wait in their startup with every
    # listener open and the strangers queue ahead of the ranks' connections.
    env["LD_PRELOAD"] = HOLD_LISTEN
    # Under AddressSanitizer the shim comes before ASan's runtime in the
    # library list, which ASan refuses by default; the shim only wraps
    # listen(2), so the order does not matter to ASan's interceptors.
    asan = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    if kind == "store":
        env["XCOLL_TEST_HOLD_CONNECT"] = "1"
    else:
        env["XCOLL_TEST_HOLD_RANK"] = "3"
    env["XCOLL_TEST_HOLD_FILE"] = ready
    prog = [PERF, "-b", "8", "-e", "4K", "-f", "8", "-n", "5"]

    def limit_files():
        # the usual default, whatever this shell allows: the library must
        # live with it
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    job = subprocess.Popen([XCOLLRUN, "--nproc-per-node", "4", "--master-port",
                            str(port)] + prog, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           preexec_fn=limit_files)
    crowd = Crowd(per_target)
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    start = time.time()
    targets = []
    flooder = None
    try:
        # Ranks 0-2 open their listeners and wait for rank 3 (nccl_like:
        # its net listeners; tcp: the mesh listener).
        while job.poll() is None and time.time() - start < LIMIT_S:
            ranks = child_pids(job.pid)
            per_rank = [startup_targets(kind, family(p), port) for p in ranks]
            found = sorted(sum(per_rank, []))
            owners = [t for t in per_rank if t]
            if kind == "store" and found and found == targets:
                break  # rank 0's store, filled once
            if len(owners) >= 3 and found and found == targets:
                break  # a second scan found nothing new
            targets = found
            crowd.fill(targets, time.time() + 20)
        queued = sum(len(v) for v in crowd.held.values())
        print("%s: %d idle connections on %d listener(s) before %s "
              "starts" % (kind, queued, len(targets),
                          "any rank's store connection" if kind == "store"
                          else "rank 3"), flush=True)
        if not targets:
            job.kill()
            fail("found no startup listener to attack (job exit %r after "
                 "%.1f s); the job said:\n%s"
                 % (job.poll(), time.time() - start,
                    job.communicate()[0][-3000:]))
        if flood and kind == "store":
            # The store's part of a job is its startup, which is short: the
            # flood of wrong first messages runs from a thread, from a
            # second before the ranks connect until the job ends, so that
            # they connect into it.
            import threading

            def flood_store():
                while not flooding_done.is_set():
                    crowd.knock(targets, os.urandom(69))
            flooding_done = threading.Event()
            flooder = threading.Thread(target=flood_store)
            flooder.start()
            time.sleep(1.0)
        open(ready, "w").close()
        released = time.time()
        # During the rest of the startup and the run: top up, or flood.
        while job.poll() is None and time.time() - released < LIMIT_S:
            live = startup_targets(kind, family(job.pid), port)
            if flood and kind != "store":
                for _ in range(20):
                    crowd.knock(live)
            crowd.prune()
            crowd.fill(live, time.time() + 1)
        try:
            out, _ = job.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            job.kill()
            fail("the job did not finish in %d s" % LIMIT_S)
        took = time.time() - released
    finally:
        if flooder is not None:
            flooding_done.set()
            flooder.join()
        crowd.close()
        if job.poll() is None:
            job.kill()
        if os.path.exists(ready):
            os.unlink(ready)
    print(out[-3000:])
    print("%s: the stranger opened %d connections, %d of them closed by a "
          "listener; the job took %.1f s after rank 3 started"
          % (kind, crowd.opened, crowd.lost, took))
    if job.returncode != 0:
        fail("the job failed (exit %d) with strangers on its listeners"
             % job.returncode)
    check_perf_output(out)
    if took > timeout_s:
        fail("the job took %.1f s, beyond XCOLL_TIMEOUT_S=%d" % (took,
                                                                  timeout_s))
    check_drop_warnings(out, took)
    if kind == "store":
        # Only the store is attacked: every WARN line of the job, whatever
        # it says, counts (its accept, its handshake, its closing count).
        warns = sum(1 for line in out.splitlines() if " WARN " in line)
        print("WARN lines in all: %d in %.1f s" % (warns, took))
        if warns > took + 5:
            fail("%d WARN lines in %.1f s under attack on the store"
                 % (warns, took))


def mode_crowd():
    kind, count = ARGS[0], int(ARGS[1])
    crowd_job(kind, count, flood=False)


def mode_flood():
    crowd_job(ARGS[0], 70, flood=True)


{"crowd": mode_crowd, "flood": mode_flood,
 "orphans": mode_orphans, "bind": mode_bind, "stranger": mode_stranger, "scan": mode_scan, "dying": mode_dying,
 "worldsize": mode_worldsize, "duprank": mode_duprank}[MODE]()
print("PASS " + MODE)
