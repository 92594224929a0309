#!/usr/bin/env python3
"""Makes one stored-schema fixture (Tests/Fixtures/stores/<schema>/) with a given vaultd.

    make-fixture.py --vaultd PATH/TO/vaultd --commit SHA --out Tests/Fixtures/stores/NN-MIGRATION [--migration MIGRATION]

Starts that vaultd on a fresh data directory, initialises it with the test passphrase,
fills it through the socket with what the version's interfaces offer (it reads them with
org.varlink.service.GetInterfaceDescription, so the same script serves every version):
keychain items of every class and accessibility (synchronizable and not), preferences of
every property-list type in an app domain, a suite and NSGlobalDomain, registered apps
(installed, reinstalled, uninstalled, and one, perl, that adds items and preferences of its
own through the socket as the app) and files in apps' cache directories. It
reads everything back through the same vaultd, stops it with SIGTERM (a clean stop),
checkpoints the WAL into vault.sqlite, and writes:

    OUT/data/        vaultd's data directory (vault.sqlite, device.key; no -wal, no -shm)
    OUT/cache/       vaultd's cache directory (the apps' cache files), when Caches exists
    OUT/manifest.json  what the fixture holds, as that vaultd read it back: the values
                     StoredSchemaTests expects today's vaultd to read from a copy

Nothing here is secret: the passphrase is a test passphrase committed in the manifest; the
fixture's data guards nothing real.
"""

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

PASSPHRASE = "stored schema fixture passphrase"


class Varlink:
    """A minimal varlink client: one JSON object and a NUL per message."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""

    def call(self, method, params=None, allow_error=False):
        msg = {"method": method}
        if params is not None:
            msg["parameters"] = params
        self.sock.sendall(json.dumps(msg).encode() + b"\0")
        while b"\0" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"{method}: connection closed")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        reply = json.loads(raw)
        if "error" in reply:
            if allow_error:
                return reply
            raise RuntimeError(f"{method}({params}): {reply}")
        return reply.get("parameters", {})


# An app's client: perl, registered as an app by its executable (/proc/PID/exe), passing the
# messages the generator writes (one JSON object a line) to the socket, and each reply back.
APP_EXECUTABLE = "/usr/bin/perl"
APP_PIPE = r"""
use IO::Socket::UNIX;
$| = 1;
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ARGV[0]) or die "connect: $!";
$s->autoflush(1);
while (my $line = <STDIN>) {
    chomp $line;
    print $s $line, "\0";
    local $/ = "\0";
    my $reply = <$s>;
    chop $reply;
    print $reply, "\n";
}
"""


def as_app(sock, messages):
    """Sends `messages` (method, parameters) on one connection of the app's client; returns the replies' parameters."""
    text = "".join(json.dumps({"method": m, "parameters": p}) + "\n" for m, p in messages)
    out = subprocess.run([APP_EXECUTABLE, "-e", APP_PIPE, sock], input=text.encode(), capture_output=True, check=True).stdout
    replies = [json.loads(line) for line in out.decode().splitlines()]
    assert len(replies) == len(messages), (messages, replies)
    for (m, p), r in zip(messages, replies):
        if "error" in r:
            raise RuntimeError(f"as the app: {m}({p}): {r}")
    return [r.get("parameters", {}) for r in replies]


def wait_for_socket(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vaultd exited with {proc.returncode}")
        if os.path.exists(path):
            try:
                Varlink(path).call("io.vaultd.Vault.Status")
                return
            except (OSError, RuntimeError):
                pass
        time.sleep(0.05)
    raise RuntimeError("vaultd did not answer")


def b64(data):
    return base64.b64encode(data).decode()


ACCESSIBILITIES = [
    "whenUnlocked",
    "afterFirstUnlock",
    "whenUnlockedThisDeviceOnly",
    "afterFirstUnlockThisDeviceOnly",
    "whenPasscodeSetThisDeviceOnly",
]


def item_specs(keychain_idl):
    """The items to add: (class, attributes, secret bytes)."""
    has_lookup = "lookupAttributes" in keychain_idl
    specs = []
    n = 0
    for cls in ["genericPassword", "internetPassword"]:
        for acc in ACCESSIBILITIES:
            for sync in [False, True]:
                if sync and acc.endswith("ThisDeviceOnly"):
                    continue  # a synchronizable item cannot be ThisDeviceOnly
                n += 1
                a = {
                    "account": f"account-{n}",
                    "label": f"{cls} {acc} sync={sync}",
                    "comment": f"comment {n} \u00e9\u00e8 \u2603",
                    "description": "fixture item",
                    "generic": b64(bytes([n, 0, 255, 1, 2])),
                    "accessGroup": "com.example.fixture.alpha" if n % 2 else "group.com.example.shared",
                    "accessible": acc,
                    "synchronizable": sync,
                }
                if cls == "genericPassword":
                    a["service"] = f"service.{acc}.{int(sync)}"
                else:
                    a.update(
                        server=f"host{n}.example.org", protocol="https", port=8000 + n, path=f"/path/{n}",
                        authenticationType="httpBasic", securityDomain=f"realm {n}")
                if has_lookup and n % 3 == 0:
                    a["lookupAttributes"] = {"xdg:schema": "org.example.Fixture", "n": str(n), "\u00fcml": "\u00e4"}
                secret = bytes([n]) + b"secret\x00\xff" + f" {cls}/{acc}/{sync}".encode()
                specs.append((cls, a, secret))
    # Defaults: no group (the owner's default), no accessibility (whenUnlocked), no sync.
    specs.append(("genericPassword", {"service": "defaults.example", "account": ""}, b""))
    specs.append(("genericPassword", {"service": "big.example", "account": "big",
                                      "accessGroup": "com.example.fixture.alpha"},
                  bytes((i * 7 + 3) % 256 for i in range(70000))))
    specs.append(("internetPassword", {"server": "\u00fcnicode.example", "account": "\u00e5\u00df\u2202 \U0001F511",
                                       "accessGroup": "com.example.fixture.alpha", "port": 0},
                  "p\u00e4ss \U0001F511".encode()))
    return specs


# Written by the app (its domain is None: the app's own), read back by the owner.
APP_ITEMS = [
    ("genericPassword", {"service": "app.example", "account": "app-user", "accessible": "afterFirstUnlock"}, b"written by the app"),
    ("internetPassword", {"server": "app.example.org", "account": "app-user", "accessGroup": "group.com.example.shared",
                          "protocol": "https"}, b"shared by the app \x00"),
]
APP_PREFERENCES = {
    None: {"app.string": {"string": "set by the app"}, "app.count": {"integer": 7}},
    "group.com.example.shared": {"app.suite": {"bool": True}},
}


def preference_values():
    nested = {"dict": {
        "level1": {"dict": {
            "level2": {"array": [{"integer": 1}, {"dict": {"deep": {"string": "bottom"}}}, {"array": []}]},
            "flag": {"bool": False}}},
        "list": {"array": [{"string": "a"}, {"real": 2.5}, {"date": "2001-01-01T00:00:00Z"}, {"data": b64(b"\x00\x01")}]},
    }}
    return {
        "string": {"string": "hello, world"},
        "string.empty": {"string": ""},
        "string.unicode": {"string": "\u00e9t\u00e9 \u2603 \U0001F600 \u05e9\u05dc\u05d5\u05dd"},
        "string.leadingNumber": {"string": "007"},
        "integer": {"integer": 42},
        "integer.negative": {"integer": -17},
        "integer.zero": {"integer": 0},
        "integer.max": {"integer": 9223372036854775807},
        "integer.min": {"integer": -9223372036854775808},
        "real": {"real": 3.25},
        "real.negative": {"real": -0.001},
        "real.large": {"real": 1.5e300},
        "real.inf": {"real": "inf"},
        "real.minusInf": {"real": "-inf"},
        "bool.true": {"bool": True},
        "bool.false": {"bool": False},
        "date": {"date": "2026-11-29T12:34:56Z"},
        "date.epoch": {"date": "1970-01-01T00:00:00Z"},
        "data": {"data": b64(bytes(range(256)))},
        "data.empty": {"data": ""},
        "array": {"array": [{"string": "one"}, {"integer": 2}, {"real": 3.5}, {"bool": True}]},
        "array.empty": {"array": []},
        "dict": {"dict": {"name": {"string": "fixture"}, "count": {"integer": 3}}},
        "dict.empty": {"dict": {}},
        "nested": nested,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vaultd", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--migration", help="the migration this schema version added (default: the last applied)")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="vaultd-fixture-")
    data, cache, sock = root + "/data", root + "/cache", root + "/run/vaultd.sock"
    for d in ["home", "xdg-run", "run"]:
        os.makedirs(root + "/" + d, mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTD_", "LISTEN_", "DBUS_"))}
    env.update(HOME=root + "/home", XDG_RUNTIME_DIR=root + "/xdg-run", XDG_DATA_HOME=root + "/home/.local/share",
               XDG_CACHE_HOME=root + "/home/.cache", XDG_CONFIG_HOME=root + "/home/.config", LC_ALL="C.UTF-8",
               VAULTD_ARGON2_TEST_COST="min")
    log = open(root + "/vaultd.log", "w")
    proc = subprocess.Popen([args.vaultd, "--socket", sock, "--data-dir", data, "--cache-dir", cache],
                            env=env, stdout=log, stderr=log)
    try:
        wait_for_socket(sock, proc)
        v = Varlink(sock)
        interfaces = v.call("org.varlink.service.GetInfo")["interfaces"]
        idl = {i: v.call("org.varlink.service.GetInterfaceDescription", {"interface": i})["description"] for i in interfaces}
        v.call("io.vaultd.Vault.Init", {"passphrase": PASSPHRASE})
        status = v.call("io.vaultd.Vault.Status")
        assert status["lock"]["state"] == "unlocked", status

        manifest = {
            "commit": args.commit,
            "passphrase": PASSPHRASE,
            "passphraseNote": "a test passphrase: the fixture guards nothing real",
            "vaultdVersion": status.get("version"),
            "interfaces": sorted(interfaces),
        }

        # Apps first: items and preferences may name their groups.
        apps = []
        if "io.vaultd.Apps" in interfaces:
            installs = [
                {"appID": "com.example.fixture.alpha", "executable": "/usr/bin/true",
                 "accessGroups": ["com.example.fixture.alpha.extra"], "appGroups": ["group.com.example.shared"],
                 "keepCredentialsOnReinstall": True},
                {"appID": "com.example.fixture.beta", "executable": "/usr/bin/false"},
                {"appID": "com.example.fixture.beta", "executable": "/usr/bin/false"},  # a reinstall
                {"appID": "com.example.fixture.gamma", "executable": "/usr/bin/head", "appGroups": ["group.com.example.shared"]},
                {"appID": "com.example.fixture.delta", "executable": "/usr/bin/yes"},
                {"appID": "com.example.fixture.perl", "executable": APP_EXECUTABLE,
                 "accessGroups": ["com.example.fixture.perl.extra"], "appGroups": ["group.com.example.shared"]},
            ]
            for p in installs:
                v.call("io.vaultd.Apps.Install", p)
            v.call("io.vaultd.Apps.Uninstall", {"appID": "com.example.fixture.delta"})

            # What the app itself writes: items of its install generation (in its default group
            # and a shared one) and preferences in its own domain and its suite.
            messages = [("io.vaultd.Vault.Hello", {})]
            for cls, a, secret in APP_ITEMS:
                messages.append(("io.vaultd.Keychain.Add", {"class": cls, "attributes": a, "data": b64(secret)}))
            for domain, values in APP_PREFERENCES.items():
                for key, value in values.items():
                    messages.append(("io.vaultd.Preferences.Set", {"domain": domain, "key": key, "value": value}))
            hello = as_app(sock, messages)[0]
            assert hello.get("appID") == "com.example.fixture.perl" and hello.get("firstLaunch") is True, hello
            app_written = True
        else:
            app_written = False

        items = []
        owner_items = item_specs(idl.get("io.vaultd.Keychain", ""))
        for n, (cls, a, secret) in enumerate(owner_items + (APP_ITEMS if app_written else [])):
            if n < len(owner_items):
                v.call("io.vaultd.Keychain.Add", {"class": cls, "attributes": a, "data": b64(secret)})
            got = v.call("io.vaultd.Keychain.CopyMatching", {
                "class": cls, "query": {k: a[k] for k in ("service", "server", "account", "accessGroup", "synchronizable") if k in a},
                "matchLimit": "all", "returnData": True, "returnAttributes": True})["items"]
            assert len(got) == 1, (a, got)
            assert base64.b64decode(got[0]["data"]) == secret, a
            for k, val in a.items():
                assert got[0]["attributes"].get(k) == val, (k, val, got[0]["attributes"])
            entry = {"class": cls, "attributes": {k: x for k, x in got[0]["attributes"].items() if x is not None},
                     "dataLength": len(secret), "dataSHA256": hashlib.sha256(secret).hexdigest()}
            if len(secret) <= 1024:
                entry["data"] = got[0]["data"]
            items.append(entry)
        manifest["items"] = items

        prefs = {}
        domains = ["com.example.fixture.alpha", "group.com.example.shared", "NSGlobalDomain"]
        if app_written:
            prefs["com.example.fixture.perl"] = v.call("io.vaultd.Preferences.Domain", {"domain": "com.example.fixture.perl"})["values"]
            assert prefs["com.example.fixture.perl"] == APP_PREFERENCES[None], prefs
        for i, domain in enumerate(domains):
            values = preference_values()
            values["domain.marker"] = {"string": domain}
            for key, value in values.items():
                v.call("io.vaultd.Preferences.Set", {"domain": domain, "key": key, "value": value})
            if app_written:
                values.update(APP_PREFERENCES.get(domain, {}))
            got = v.call("io.vaultd.Preferences.Domain", {"domain": domain})["values"]
            assert set(got) == set(values), (domain, set(got) ^ set(values))
            for key, value in values.items():
                assert got[key] == value, (domain, key, value, got[key])
            prefs[domain] = got
        manifest["preferences"] = prefs

        caches = {}
        if "io.vaultd.Caches" in interfaces and "io.vaultd.Apps" in interfaces:
            for app, files in [("com.example.fixture.alpha", {"a.bin": 5000, "sub/b.txt": 12, "sub/deeper/c": 70000}),
                               ("com.example.fixture.gamma", {"only.dat": 1})]:
                d = v.call("io.vaultd.Caches.Directory", {"appID": app})["path"]
                for name, size in files.items():
                    os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
                    with open(os.path.join(d, name), "wb") as f:
                        f.write(bytes((i * 13) % 256 for i in range(size)))
                caches[app] = {"files": files, "relativeDirectory": os.path.relpath(d, cache)}
        manifest["caches"] = caches

        if "io.vaultd.Apps" in interfaces:
            manifest["apps"] = sorted(v.call("io.vaultd.Apps.List")["apps"], key=lambda x: x["appID"])
        else:
            manifest["apps"] = []
        final = v.call("io.vaultd.Vault.Status")
        manifest["status"] = {"items": final["items"], "domains": final["domains"]}
        assert final["items"] == len(items), final
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
    if rc != 0:
        sys.exit(f"vaultd exited with {rc}; log in {root}/vaultd.log")

    # Everything in vault.sqlite itself: the WAL checkpointed and removed.
    db = sqlite3.connect(data + "/vault.sqlite")
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    busy, log_frames, done = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0 and log_frames == done, (busy, log_frames, done)
    manifest["migrations"] = [r[0] for r in db.execute("SELECT name FROM schema_migrations ORDER BY rowid")]
    manifest["migration"] = args.migration or manifest["migrations"][-1]
    assert manifest["migration"] in manifest["migrations"], manifest["migrations"]
    manifest["journalMode"] = mode
    db.close()

    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    os.makedirs(out + "/data")
    for name in sorted(os.listdir(data)):
        if name.endswith(("-wal", "-shm")) or name.endswith(".lock"):
            continue
        src = os.path.join(data, name)
        if os.path.isfile(src):
            shutil.copy2(src, out + "/data/" + name)
    manifest["dataFiles"] = sorted(os.listdir(out + "/data"))
    if caches:
        shutil.copytree(cache, out + "/cache", symlinks=True)
    with open(out + "/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    shutil.rmtree(root)
    print(f"{out}: {manifest['migration']}, {len(items)} items, {sum(len(p) for p in prefs.values())} preferences, "
          f"{len(manifest['apps'])} apps, {sum(len(c['files']) for c in caches.values())} cache files")


if __name__ == "__main__":
    main()
