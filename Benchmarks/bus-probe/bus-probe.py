#!/usr/bin/python3
# GDBus against sd-bus for what the Secret Service front-end needs (docs/secret-service.md,
# "Why GDBus"): the same small service (probe.c) built on each, on a private session bus.
# For each library it prints the service's CPU time per Ping (a round trip with nothing to
# decode), the client's p50 round trip, and what one Search with an a{ss} of MB megabytes of
# tiny entries (sent by a plain python client: nothing decodes it on the way but the bus
# daemon) does to the service: VmRSS before, VmHWM (its peak) and VmRSS a second after the
# reply, in MiB, and how long the reply took.
#
#   dbus-run-session -- python3 Benchmarks/bus-probe/bus-probe.py [PINGS] [MB]
import os, socket, statistics, struct, subprocess, sys, tempfile, time
import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib

pings = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
mb = int(sys.argv[2]) if len(sys.argv) > 2 else 50
here = os.path.dirname(os.path.abspath(__file__))
build = tempfile.mkdtemp()
probe = os.path.join(build, "probe")
flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "gio-2.0", "libsystemd"], text=True).split()
subprocess.check_call(["cc", "-O2", os.path.join(here, "probe.c"), "-o", probe] + flags)

def status(pid, field):
    for l in open("/proc/%d/status" % pid):
        if l.startswith(field + ":"): return int(l.split()[1]) / 1024.0

def cpu(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def pad(b, n): return b + b"\0" * (-len(b) % n)
def message(serial, fields, body=b"", signature=""):
    out = bytearray(b"l\x01\x00\x01" + struct.pack("<III", len(body), serial, 0))
    if signature: fields = fields + [(8, "g", signature)]
    for code, sig, val in fields:
        out += b"\0" * (-len(out) % 8)
        out += bytes([code, 1]) + sig.encode() + b"\0"
        v = val.encode()
        if sig == "g": out += bytes([len(v)]) + v + b"\0"
        else: out += b"\0" * (-len(out) % 4) + struct.pack("<I", len(v)) + v + b"\0"
    struct.pack_into("<I", out, 12, len(out) - 16)
    return bytes(pad(bytes(out), 8)) + body

def raw_connection():
    path = os.environ["DBUS_SESSION_BUS_ADDRESS"].split("path=")[1].split(",")[0]
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    s.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\nBEGIN\r\n")
    s.sendall(message(1, [(1, "o", "/org/freedesktop/DBus"), (2, "s", "org.freedesktop.DBus"), (3, "s", "Hello"), (6, "s", "org.freedesktop.DBus")]))
    buf = b""
    while b"\r\n" not in buf: buf += recv(s)
    assert buf.startswith(b"OK"), buf
    return s, buf.split(b"\r\n", 1)[1]

def recv(s):
    b = s.recv(1 << 16)
    if not b: raise EOFError("the bus closed the connection")
    return b

def read_reply(s, serial, buf):
    while True:
        while len(buf) < 16: buf += recv(s)
        blen, _, flen = struct.unpack_from("<III", buf, 4)
        total = 16 + flen + (-(16 + flen) % 8) + blen
        while len(buf) < total: buf += recv(s)
        m, buf = buf[:total], buf[total:]
        # The reply's REPLY_SERIAL header field (code 5, signature u).
        if m[1] in (2, 3) and struct.pack("<BBBBI", 5, 1, ord("u"), 0, serial) in m[16:16 + flen]:
            return m[1]

# One entry: key "a" and value "b", each 4 + 2 bytes, the entry 8-aligned: 16 bytes.
entry = struct.pack("<I", 1) + b"a\0" + b"\0\0" + struct.pack("<I", 1) + b"b\0" + b"\0\0"
entries = (mb << 20) // len(entry)
# The array ends at its last entry's last byte (no padding after it).
body = struct.pack("<I", entries * len(entry) - 2) + b"\0\0\0\0" + (entry * entries)[:-2]

client = Gio.bus_get_sync(Gio.BusType.SESSION, None)
for lib in ["gdbus", "sdbus"]:
    name = "io.vaultd.Probe." + lib
    p = subprocess.Popen([probe, lib, name], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    for _ in range(200):
        client.call_sync(name, "/", "io.vaultd.Probe", "Ping", None, None, 0, -1, None)
    c0 = cpu(p.pid)
    times = []
    for _ in range(pings):
        t = time.perf_counter()
        client.call_sync(name, "/", "io.vaultd.Probe", "Ping", None, None, 0, -1, None)
        times.append(time.perf_counter() - t)
    per_ping = (cpu(p.pid) - c0) / pings * 1e6
    p50 = statistics.median(times) * 1e6
    before = status(p.pid, "VmRSS")
    s, buf = raw_connection()
    t = time.monotonic()
    s.sendall(message(2, [(1, "o", "/"), (2, "s", "io.vaultd.Probe"), (3, "s", "Search"), (6, "s", name)], body, "a{ss}"))
    kind = read_reply(s, 2, buf)
    took = time.monotonic() - t
    time.sleep(1)
    print("%s: Ping %.1f us of the service's CPU, p50 %.0f us; Search of %d MB (%d entries): %s in %.1f s, VmRSS %.0f MiB before, VmHWM %.0f, VmRSS %.0f after"
          % (lib, per_ping, p50, mb, entries, "reply" if kind == 2 else "error", took, before,
             status(p.pid, "VmHWM"), status(p.pid, "VmRSS")), flush=True)
    s.close()
    p.kill(); p.wait()
