#!/usr/bin/env python3
"""Sync figures: two vaultds sharing one folder (no engine), N synchronizable items added on A.

    Benchmarks/sync-bench.py [--bin .build/release] [N ...]      (default: 1000 10000)

For each N it reports: the time to add the N items on A (one varlink connection, each Add
durable), the time from the last Add until B's merged vault holds all N and nothing is
pending, the segments and bytes in the folder then and once compaction has settled (the
folder unchanged for 3 s), and then the time one update on A takes to show on B with N items
in the vault. Uses python's varlink package (scripts/install-deps).
"""
import argparse, base64, os, shutil, subprocess, sys, tempfile, time
import varlink


def wait(cond, timeout=600):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    raise SystemExit("timed out")


class Daemon:
    def __init__(self, bin, root, name):
        self.bin, self.sock, self.data = bin, f"{root}/{name}.sock", f"{root}/{name}-data"
        self.env = dict(os.environ, VAULTD_SOCKET=self.sock, HOME=root)
        self.log = open(f"{root}/{name}.log", "w")
        self.proc = subprocess.Popen([f"{bin}/vaultd", "--socket", self.sock, "--data-dir", self.data], stdout=self.log, stderr=self.log, env=self.env)
        wait(lambda: os.path.exists(self.sock), 30)
        time.sleep(0.2)
        self.ctl("init", "--no-passphrase")
        self.client = varlink.Client.new_with_address("unix:" + self.sock)

    def ctl(self, *args):
        r = subprocess.run([f"{self.bin}/vaultctl", *args], env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"vaultctl {args}: {r.stderr}")
        return r.stdout

    def status(self):
        with self.client.open("io.vaultd.Sync") as s:
            return s.Status()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def pending(st):
    return sum(d["pending"] for d in st["devices"])


def run(bin, n):
    root = tempfile.mkdtemp(prefix="vaultd-syncbench.")
    folder = f"{root}/folder"
    os.mkdir(folder)
    a, b = Daemon(bin, root, "a"), Daemon(bin, root, "b")
    try:
        a.ctl("sync", "init", folder)
        code = [l for l in b.ctl("sync", "join", folder).splitlines() if "sync approve" in l][0].split()[-1]
        a.ctl("sync", "approve", code)
        wait(lambda: b.status()["state"] == "member")
        t0 = time.monotonic()
        with a.client.open("io.vaultd.Keychain") as k:
            for i in range(n):
                k.Add("genericPassword", {"service": f"svc{i}.example.com", "account": f"user{i}", "synchronizable": True},
                      base64.b64encode(f"password-{i}".encode()).decode())
        t1 = time.monotonic()
        wait(lambda: (lambda s: s["items"] == n and pending(s) == 0)(b.status()))
        t2 = time.monotonic()
        def folder_size():
            # A file compaction deletes between the listing and its stat counts as gone.
            sizes = []
            for d, _, fs in os.walk(folder):
                for f in fs:
                    if f.endswith(".seg"):
                        try:
                            sizes.append(os.path.getsize(os.path.join(d, f)))
                        except FileNotFoundError:
                            pass
            return len(sizes), sum(sizes)
        nsegs, size = folder_size()
        # Compaction follows in the passes after (once B's ack covers A's segments): wait until
        # A's segments are one snapshot (at most 120 s) and the folder has not changed for 3 s,
        # then measure it again and time one update.
        a_dir = os.path.join(folder, "devices", a.status()["deviceID"])
        end = time.monotonic() + 120
        while time.monotonic() < end and sum(f.endswith(".seg") for f in os.listdir(a_dir)) > 1:
            time.sleep(0.1)
        last, since = None, time.monotonic()
        while time.monotonic() - since < 3:
            cur = folder_size()
            if cur != last:
                last, since = cur, time.monotonic()
            time.sleep(0.1)
        wait(lambda: pending(b.status()) == 0)
        csegs, csize = last
        with a.client.open("io.vaultd.Keychain") as k:
            t3 = time.monotonic()
            k.Update("genericPassword", {"service": "svc0.example.com", "account": "user0"}, {"label": "changed"}, None)
        def updated():
            r = subprocess.run([f"{bin}/vaultctl", "item", "get", "--service", "svc0.example.com", "--account", "user0", "--json"],
                               env=b.env, capture_output=True, text=True)
            return '"label":"changed"' in r.stdout.replace(" ", "")
        wait(updated)
        t4 = time.monotonic()
        print(f"N={n}: add on A {t1 - t0:.2f} s; B converged {t2 - t1:.2f} s after the last add; "
              f"{nsegs} segments, {size} bytes ({size / n:.0f} B/item); compacted: {csegs} segments, {csize} bytes ({csize / n:.0f} B/item); "
              f"one update A->B with N items: {(t4 - t3) * 1000:.0f} ms")
    finally:
        a.stop()
        b.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default=".build/release")
    p.add_argument("n", nargs="*", type=int, default=[1000, 10000])
    args = p.parse_args()
    for n in args.n:
        run(os.path.abspath(args.bin), n)
