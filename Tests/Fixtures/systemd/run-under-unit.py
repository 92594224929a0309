#!/usr/bin/python3
"""Runs a command under the sandbox settings of a systemd unit's [Service] section, as far as
they can be applied without a service manager (the test machine has none): the same kernel
mechanisms systemd uses, set up here by hand, before exec'ing the command.

    run-under-unit.py UNIT_FILE -- COMMAND [ARG...]

Needs root (namespaces, mounts) and python3-seccomp. %h and %t in paths are HOME and
XDG_RUNTIME_DIR, as in a user manager. Prints on stderr one line per setting, `applied:` or
`not applied:` (with why); a setting it does not know at all is `unknown:`, so a test can
require that every setting was applied. Emulated:

- ProtectSystem=strict with ReadWritePaths (a `-` prefix: ignored when missing): a private mount
  namespace where every mount but /proc, /sys and /dev is remounted read-only, after each
  writable path has been bind-mounted onto itself;
- PrivateDevices: a new /dev holding only null, zero, full, random, urandom, tty, shm, pts;
- ProtectKernelTunables, ProtectControlGroups: /proc/sys and /sys read-only;
- PrivateNetwork: a new network namespace (loopback only, down);
- NoNewPrivileges (prctl PR_SET_NO_NEW_PRIVS), MemoryDenyWriteExecute (PR_SET_MDWE with
  PR_MDWE_REFUSE_EXEC_GAIN, the kernel's own form of it, kept across exec);
- SystemCallFilter (each line; `~` lines deny), SystemCallErrorNumber, SystemCallArchitectures,
  RestrictAddressFamilies (an allow list): one seccomp filter, whose groups (@system-service,
  ...) are expanded by `systemd-analyze syscall-filter`, as systemd expands them;
- UMask, LimitCORE, Environment.
"""
import ctypes
import errno
import os
import re
import socket
import subprocess
import sys
import tempfile

import seccomp

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 38, 65, 1


def say(kind, setting, why=""):
    print(f"run-under-unit: {kind}: {setting}" + (f" ({why})" if why else ""), file=sys.stderr, flush=True)


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def service_settings(path):
    settings, section = [], None
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.append((key.strip(), value.strip()))
    return settings


def expand(value):
    return value.replace("%h", os.environ["HOME"]).replace("%t", os.environ["XDG_RUNTIME_DIR"])


def syscalls_of(group, seen=None):
    """The syscalls a SystemCallFilter word names, groups expanded as systemd expands them."""
    if not group.startswith("@"):
        return {group}
    seen = seen or set()
    if group in seen:
        return set()
    seen.add(group)
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        names |= syscalls_of(word, seen)
    return names


def mounts():
    points = []
    for line in open("/proc/self/mountinfo", encoding="utf-8"):
        points.append(line.split()[4].encode().decode("unicode_escape"))
    return points


def main():
    unit, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    settings = service_settings(unit)
    handled = {"Type", "ExecStart", "ExecStartPre", "ExecReload", "KillSignal", "TimeoutStopSec"}
    value = {}
    for k, v in settings:
        value.setdefault(k, []).append(v)
    env = dict(os.environ)

    # `ExecStartPre=+…` lines: outside the sandbox, before it is set up.
    for v in value.get("ExecStartPre", []):
        if v.startswith("+"):
            run(*expand(v[1:]).split())
            say("applied", "ExecStartPre=" + v)

    # Namespaces and mounts first (they need the privileges the filters below take away).
    if value.get("PrivateNetwork") == ["yes"]:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        say("applied", "PrivateNetwork=yes")
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    run("mount", "--make-rprivate", "/")
    if "PrivateMounts" in value:
        say("applied", "PrivateMounts=yes", "a private mount namespace")
    if value.get("PrivateDevices") == ["yes"]:
        stage = tempfile.mkdtemp()
        run("mount", "-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", stage)
        for node in ["null", "zero", "full", "random", "urandom", "tty"]:
            open(f"{stage}/{node}", "w").close()
            run("mount", "--bind", f"/dev/{node}", f"{stage}/{node}")
        for d in ["shm", "pts"]:
            os.mkdir(f"{stage}/{d}")
        run("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", f"{stage}/shm")
        for i, name in enumerate(["stdin", "stdout", "stderr"]):
            os.symlink(f"/proc/self/fd/{i}", f"{stage}/{name}")
        run("mount", "--move", stage, "/dev")
        os.rmdir(stage)
        say("applied", "PrivateDevices=yes")
        if value.get("DevicePolicy") == ["closed"]:
            say("applied", "DevicePolicy=closed", "only the devices PrivateDevices provides exist")
    writable = []
    for v in value.get("ReadWritePaths", []):
        for p in v.split():
            optional = p.startswith("-")
            p = expand(p.lstrip("-"))
            if not os.path.exists(p):
                if optional:
                    continue
                # systemd refuses to start the unit then (226/NAMESPACE).
                sys.exit(f"run-under-unit: ReadWritePaths: {p} does not exist")
            writable.append(p)
    if value.get("ProtectSystem") == ["strict"]:
        for p in writable:
            run("mount", "--bind", p, p)
        for point in sorted(set(mounts())):
            if point in writable or re.match(r"^/(proc|sys|dev)(/|$)", point):
                continue
            subprocess.run(["mount", "-o", "remount,bind,ro", point], stderr=subprocess.DEVNULL)
        say("applied", "ProtectSystem=strict", "writable: " + " ".join(writable))
        say("applied", "ReadWritePaths")
    for setting in ["ProtectKernelTunables", "ProtectControlGroups"]:
        if value.get(setting) == ["yes"]:
            for p in ["/proc/sys", "/sys"] if setting == "ProtectKernelTunables" else ["/sys/fs/cgroup"]:
                if os.path.isdir(p):
                    subprocess.run(["mount", "--bind", p, p], stderr=subprocess.DEVNULL)
                    subprocess.run(["mount", "-o", "remount,bind,ro", p], stderr=subprocess.DEVNULL)
            say("applied", f"{setting}=yes")

    for v in value.get("Environment", []):
        k, _, val = expand(v).partition("=")
        env[k] = val
    if "UMask" in value:
        os.umask(int(value["UMask"][-1], 8))
        say("applied", "UMask=" + value["UMask"][-1])
    if "LimitCORE" in value:
        import resource
        n = int(value["LimitCORE"][-1])
        resource.setrlimit(resource.RLIMIT_CORE, (n, n))
        say("applied", "LimitCORE=" + value["LimitCORE"][-1])
    if value.get("NoNewPrivileges") == ["yes"]:
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        say("applied", "NoNewPrivileges=yes")
    if value.get("MemoryDenyWriteExecute") == ["yes"]:
        if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_MDWE")
        say("applied", "MemoryDenyWriteExecute=yes", "PR_SET_MDWE")

    # One seccomp filter, last: the syscall allow list, its denials, and the address families.
    allowed, denied = set(), set()
    for v in value.get("SystemCallFilter", []):
        words = v.lstrip("~").split()
        names = set().union(*(syscalls_of(w) for w in words))
        (denied if v.startswith("~") else allowed).update(names)
    families = None
    if "RestrictAddressFamilies" in value:
        families = [getattr(socket, f) for f in " ".join(value["RestrictAddressFamilies"]).split()]
    if allowed or families is not None:
        deny = seccomp.ERRNO(getattr(errno, (value.get("SystemCallErrorNumber") or ["EPERM"])[-1]))
        f = seccomp.SyscallFilter(defaction=deny if allowed else seccomp.ALLOW)
        for name in sorted(allowed - denied - {"socket"}):
            try:
                f.add_rule(seccomp.ALLOW, name)
            except (RuntimeError, ValueError):
                pass  # not a syscall on this architecture
        for name in sorted(denied) if not allowed else []:
            try:
                f.add_rule(deny, name)
            except (RuntimeError, ValueError):
                pass
        if families is None:
            if not allowed or ("socket" in allowed and "socket" not in denied):
                f.add_rule(seccomp.ALLOW, "socket")
        else:
            for fam in families:
                f.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, fam))
            # As systemd: another family is EAFNOSUPPORT (with several families allowed, the
            # filter's default action instead: one rule cannot compare an argument twice).
            if len(families) == 1:
                f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.NE, families[0]))
            say("applied", "RestrictAddressFamilies=" + " ".join(value["RestrictAddressFamilies"]))
        if value.get("SystemCallArchitectures") == ["native"]:
            say("applied", "SystemCallArchitectures=native", "the filter admits the native architecture only")
        f.load()
        if allowed:
            say("applied", "SystemCallFilter", f"{len(allowed - denied)} syscalls allowed")
            if "SystemCallErrorNumber" in value:
                say("applied", "SystemCallErrorNumber=" + value["SystemCallErrorNumber"][-1])

    for k in value:
        if k in handled or k.startswith("SystemCall") or k in {
            "RestrictAddressFamilies", "PrivateNetwork", "PrivateMounts", "PrivateDevices", "DevicePolicy", "ReadWritePaths",
            "ProtectSystem", "ProtectKernelTunables", "ProtectControlGroups", "Environment", "UMask", "LimitCORE",
            "NoNewPrivileges", "MemoryDenyWriteExecute",
        }:
            continue
        if k in {"CapabilityBoundingSet", "AmbientCapabilities", "RestrictSUIDSGID", "ProtectKernelModules", "ProtectKernelLogs",
                 "ProtectClock", "ProtectHostname", "ProtectProc", "RestrictNamespaces", "RestrictRealtime", "LockPersonality",
                 "RemoveIPC", "KeyringMode"}:
            # Each denies vaultd something it never asks for (capabilities, modules, the kernel
            # log, the clock, the hostname, other users' processes, namespaces, realtime
            # scheduling, personality changes); systemd enforces them with the seccomp filter
            # and mounts above or by dropping privileges a user's service never has.
            say("not applied", f"{k}={value[k][-1]}", "denies what vaultd never asks for; not emulated here")
            continue
        say("unknown", k)
    os.execvpe(command[0], command, env)


main()
