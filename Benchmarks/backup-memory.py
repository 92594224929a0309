#!/usr/bin/env python3
"""Peak resident memory of vaultd during a backup and a restore (docs/benchmarks.md).

Starts a vaultd on a scratch directory, fills it with ITEMS items (pipelined Keychain.Add calls
on its socket: 200-byte comments, 64-byte secrets, as issue 39 measured), backs it up with
`vaultctl backup --recipient` (an age-keygen key: no scrypt in the figures), restores the file
into a second vaultd, and restores a copy padded to 900 MB (sparse) into a third. For each, the
peak is reset first (/proc/PID/clear_refs 5) and VmHWM read after, from /proc/PID/status.

    Benchmarks/backup-memory.py --items 10000 [--vaultd PATH --vaultctl PATH] [--no-padded]

Prints one line per operation: its wall time, vaultd's VmHWM and its growth over VmRSS before.
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                fields[k] = int(v.split()[0])
    return fields


class Vaultd:
    def __init__(self, binary, ctl, root):
        self.ctl_binary = ctl
        self.root = root
        self.socket = os.path.join(root, "run", "vaultd.sock")
        for d in ("run", "data", "home", "xdg-run"):
            os.makedirs(os.path.join(root, d), mode=0o700, exist_ok=True)
        self.env = dict(os.environ)
        for k in ("VAULTD_DATA_DIR", "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "LISTEN_FDS"):
            self.env.pop(k, None)
        self.env.update(
            HOME=os.path.join(root, "home"), XDG_RUNTIME_DIR=os.path.join(root, "xdg-run"),
            VAULTD_ARGON2_TEST_COST="min", VAULTD_SOCKET=self.socket, LC_ALL="C.UTF-8",
            VAULTCTL_TIMEOUT="1200")
        self.log = open(os.path.join(root, "vaultd.log"), "w")
        self.process = subprocess.Popen(
            [binary, "--socket", self.socket, "--data-dir", os.path.join(root, "data")],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.process.poll() is not None:
                sys.exit(f"vaultd did not start; see {root}/vaultd.log")
            time.sleep(0.05)

    def ctl(self, *args):
        return subprocess.run([self.ctl_binary, *args], env=self.env, capture_output=True,
                              text=True)

    def add(self, count, batch=500):
        """Adds `count` items, `batch` calls in flight on one connection."""
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.socket)
        buffered = b""
        done = 0
        while done < count:
            n = min(batch, count - done)
            calls = b"".join(
                json.dumps({"method": "io.vaultd.Keychain.Add", "parameters": {
                    "class": "genericPassword",
                    "attributes": {"service": "bulk", "account": f"a{done + i}",
                                   "comment": "c" * 200},
                    "data": base64.b64encode(os.urandom(64)).decode()}}).encode() + b"\0"
                for i in range(n))
            s.sendall(calls)
            replies = 0
            while replies < n:
                chunk = s.recv(1 << 20)
                if not chunk:
                    sys.exit("vaultd closed the connection")
                buffered += chunk
                while b"\0" in buffered:
                    reply, _, buffered = buffered.partition(b"\0")
                    if b'"error"' in reply:
                        sys.exit(f"Add failed: {reply[:200]!r}")
                    replies += 1
            done += n
        s.close()

    def measure(self, what, *args):
        pid = self.process.pid
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        before = status(pid)
        start = time.monotonic()
        r = self.ctl(*args)
        seconds = time.monotonic() - start
        after = status(pid)
        growth = (after["VmHWM"] - before["VmRSS"]) / 1024
        print(f"{what}: {seconds:.2f} s, VmHWM {after['VmHWM'] / 1024:.1f} MiB "
              f"(+{growth:.1f} MiB over VmRSS before), exit {r.returncode}: "
              f"{(r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else ''}",
              flush=True)
        return r

    def close(self):
        self.process.terminate()
        self.process.wait(120)
        self.log.close()


def main():
    build = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".build", "debug")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=10000)
    p.add_argument("--vaultd", default=os.path.join(build, "vaultd"))
    p.add_argument("--vaultctl", default=os.path.join(build, "vaultctl"))
    p.add_argument("--no-padded", action="store_true", help="skip the 900 MB padded file")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="backup-memory-")
    try:
        key = os.path.join(root, "key.txt")
        keygen = subprocess.run(["age-keygen", "-o", key], capture_output=True, text=True,
                                check=True)
        recipient = keygen.stderr.split("Public key: ")[1].split()[0]
        source = Vaultd(a.vaultd, a.vaultctl, os.path.join(root, "a"))
        source.ctl("init", "--no-passphrase")
        start = time.monotonic()
        source.add(a.items)
        print(f"{a.items} items added in {time.monotonic() - start:.1f} s", flush=True)
        backup = os.path.join(root, "vault.age")
        r = source.measure(f"backup of {a.items} items", "backup", backup, "--recipient",
                           recipient)
        source.close()
        if r.returncode != 0:
            sys.exit(r.stderr)
        print(f"backup file: {os.path.getsize(backup)} bytes", flush=True)
        target = Vaultd(a.vaultd, a.vaultctl, os.path.join(root, "b"))
        target.ctl("init", "--no-passphrase")
        target.measure(f"restore of {a.items} items", "restore", backup, "--identity", key)
        target.close()
        if not a.no_padded:
            padded = os.path.join(root, "padded.age")
            shutil.copyfile(backup, padded)
            os.truncate(padded, 900_000_000)
            third = Vaultd(a.vaultd, a.vaultctl, os.path.join(root, "c"))
            third.ctl("init", "--no-passphrase")
            third.measure("restore of the backup padded to 900 MB", "restore", padded,
                          "--identity", key)
            third.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
