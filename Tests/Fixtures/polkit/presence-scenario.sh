#!/bin/sh
# The user-presence scenario of PresenceTests (Tests/IntegrationTests/Keychain/PresenceTests.swift):
# the real polkitd on a private system bus, vaultd and its clients as a dedicated user, and
# pkttyagent answering on a tmux pane. Run as root in a mount namespace (mounts made here are
# its only) and a PID namespace (all it starts ends with it, even when it is killed):
#   unshare -m -p --fork --kill-child --mount-proc sh presence-scenario.sh \
#     DIR USER VAULTD VAULTCTL GIT_HELPER POLICY
# DIR: a fresh directory (0755) this script fills; USER: a user whose password is in
# $DIR/password (the test made it); POLICY: dist/polkit/io.vaultd.policy.
# Prints one line per case, `case=NAME rc=N out=… err=…`, which the test asserts on.
#
# Why a mount namespace: polkit-agent-helper-1 is setuid root, so GLib ignores
# DBUS_SYSTEM_BUS_ADDRESS in it and it reaches polkitd through /run/dbus/system_bus_socket;
# and polkitd reads actions from /usr/share/polkit-1/actions only. Both paths are mounted over
# here, for this namespace, so nothing of the host's changes.
set -u
T=$1 USER=$2 VAULTD=$3 VAULTCTL=$4 GIT_HELPER=$5 POLICY=$6
PASSWORD=$(cat "$T/password")
U=$T/u
BUS=/run/dbus/system_bus_socket
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$BUS
AS_USER="setpriv --reuid=$USER --regid=$USER --clear-groups env -i PATH=/usr/bin:/bin HOME=$U/home LC_ALL=C.UTF-8 DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS VAULTD_SOCKET=$U/vaultd.sock VAULTD_ARGON2_TEST_COST=min"
TMUX="tmux -S $T/tmux.sock"
PIDS=""

fail() { echo "error: $*"; exit 1; }
cleanup() {
  $TMUX kill-server 2>/dev/null
  for p in $PIDS; do kill "$p" 2>/dev/null; done
}
trap cleanup EXIT

# Polls `$1` (a shell condition) every 50 ms for at most `$2` seconds (default 20).
wait_for() {
  n=$(( ${2:-20} * 20 ))
  while ! eval "$1"; do
    n=$((n - 1))
    [ $n -le 0 ] && return 1
    sleep 0.05
  done
}

# The system bus, as system.conf makes it, listening where the agent helper looks.
mkdir -p /run/dbus && mount -t tmpfs -o mode=0755 tmpfs /run/dbus || fail "mount /run/dbus"
mkdir -p "$T/actions" && cp /usr/share/polkit-1/actions/* "$T/actions/" 2>/dev/null
cp "$POLICY" "$T/actions/" && mount --bind "$T/actions" /usr/share/polkit-1/actions \
  || fail "mount the actions"
cat > "$T/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <auth>EXTERNAL</auth>
  <listen>unix:path=$BUS</listen>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <includedir>/usr/share/dbus-1/system.d</includedir>
</busconfig>
EOF
dbus-daemon --config-file="$T/bus.conf" --nofork --nopidfile > "$T/dbus.log" 2>&1 &
SYSTEM_BUS=$!
PIDS="$! $PIDS"
wait_for "[ -S $BUS ]" || fail "the private system bus did not start"
/usr/lib/polkit-1/polkitd --no-debug > "$T/polkitd.log" 2>&1 &
POLKITD=$!
PIDS="$! $PIDS"
wait_for "gdbus call --system -d org.freedesktop.PolicyKit1 -o /org/freedesktop/PolicyKit1/Authority -m org.freedesktop.DBus.Properties.Get org.freedesktop.PolicyKit1.Authority BackendName >/dev/null 2>&1" \
  || fail "polkitd did not start: $(cat "$T/polkitd.log")"

# vaultd as the user, with a short presence timeout (the silent case waits it out).
# SecretAccess open: the grace cases read with python3 an item vaultctl created, which a new
# vault's confirm would put to a per-program question that no prompter here answers (asked
# before presence, and refused: docs/access.md); this scenario is about presence.
settings() {
  cat > "$U/config.plist" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
<key>PresenceGraceSeconds</key><integer>$1</integer>
<key>PresenceTimeoutSeconds</key><integer>$2</integer>
<key>SecretAccess</key><string>open</string>
</dict></plist>
EOF
}
settings 10 8
# The user's session bus, for vaultd's Secret Service and secret-tool.
$AS_USER dbus-daemon --session --nofork --nopidfile --print-address=1 > "$T/session-address" \
  2> "$T/session.log" &
PIDS="$! $PIDS"
wait_for "[ -s $T/session-address ]" || fail "the session bus did not start"
AS_USER="$AS_USER DBUS_SESSION_BUS_ADDRESS=$(head -1 "$T/session-address")"
$AS_USER "$VAULTD" --socket "$U/vaultd.sock" --data-dir "$U/data" --config "$U/config.plist" \
  --secret-service > "$T/vaultd.log" 2>&1 &
VD=$!
PIDS="$VD $PIDS"
wait_for "[ -S $U/vaultd.sock ]" || fail "vaultd did not start: $(cat "$T/vaultd.log")"
$AS_USER "$VAULTCTL" init --no-passphrase > /dev/null || fail "vaultctl init"
printf 's3cret-presence' | $AS_USER "$VAULTCTL" item add --service presence.example \
  --account alice --require-presence --secret-stdin > /dev/null || fail "item add"

report() { # NAME RC
  echo "case=$1 rc=$2 out=$(tr '\n' ' ' < "$T/out.$1") err=$(head -c 400 "$T/err.$1" | tr '\n' ' ')"
}

# Starts `$2...` as the user, held until its agent is registered: the agent is registered for
# the process, whose pid and start time an exec keeps. Sets P. NAME=$1.
start_held() {
  name=$1; shift
  rm -f "$T/go" && mkfifo -m 0666 "$T/go"
  $AS_USER sh -c "read x < $T/go; exec \"\$@\"" sh "$@" > "$T/out.$name" 2> "$T/err.$name" < "$T/in" &
  P=$!
}

# Registers pkttyagent for process $P on a tmux pane named $1 (returns once registered).
agent() {
  rm -f "$T/ready" && mkfifo -m 0666 "$T/ready"
  $TMUX new-session -d -s "$1" -x 120 -y 20 \
    "$AS_USER pkttyagent --process $P --notify-fd 3 3>$T/ready; sleep 600"
  timeout 20 cat "$T/ready" > /dev/null
}
pane() { $TMUX capture-pane -p -t "$1" 2>/dev/null; }

# ask NAME ANSWER COMMAND...: runs COMMAND as the user ($T/in its stdin); the agent types
# ANSWER (a password), presses ^C on the prompt (cancel), shows the prompt and is never
# answered (silent), or is not there at all (none).
ask() {
  name=$1 answer=$2
  shift 2
  start_held "$name" "$@"
  [ "$answer" = none ] || agent "$name"
  echo go > "$T/go"
  case "$answer" in
    none | silent) ;;
    cancel)
      wait_for "pane $name | grep -q Password:" && $TMUX send-keys -t "$name" C-c ;;
    *)
      wait_for "pane $name | grep -q Password:" && $TMUX send-keys -t "$name" "$answer" Enter ;;
  esac
  timeout 60 sh -c "while kill -0 $P 2>/dev/null; do sleep 0.05; done" || kill -9 $P
  wait $P
  rc=$?
  pane "$name" > "$T/pane.$name"
  $TMUX kill-session -t "$name" 2>/dev/null
  report "$name" "$rc"
}
# Makes $T/in a regular file holding $1 (after `twice`, it is a FIFO, which would block).
input() { rm -f "$T/in" && printf "$1" > "$T/in"; }
# `vaultctl item get` of the protected item.
get() { input ''; ask "$1" "$2" "$VAULTCTL" item get --service presence.example --account alice; }

# The git credential helper reads through the same door: an internet password made
# presence-protected after it was stored.
printf 'protocol=https\nhost=git.example.org\nusername=bob\npassword=git-pw-9\n\n' \
  | $AS_USER "$GIT_HELPER" store || fail "git-credential-vault store"
$AS_USER "$VAULTCTL" item update internet --server git.example.org --set-require-presence \
  --yes > /dev/null || fail "item update --set-require-presence"
ask_git() {
  input 'protocol=https\nhost=git.example.org\nusername=bob\n\n'
  ask "$1" "$2" "$GIT_HELPER" get
}
ask_git git-right "$PASSWORD"
ask_git git-none none

# The Secret Service: an item secret-tool stored, then made presence-protected; its lookup
# (SearchItems, then GetSecrets) waits on a worker of vaultd's for the user.
wait_for "$AS_USER gdbus call --session -d org.freedesktop.secrets -o /org/freedesktop/secrets -m org.freedesktop.DBus.Peer.Ping >/dev/null 2>&1" \
  || fail "no Secret Service: $(cat "$T/vaultd.log")"
printf 'ss-pw-3' | $AS_USER secret-tool store --label=presence service presence.ss \
  || fail "secret-tool store"
$AS_USER "$VAULTCTL" item update --service org.freedesktop.secrets --set-require-presence \
  --yes > /dev/null || fail "item update of the Secret Service item"
ask_ss() { input ''; ask "$1" "$2" secret-tool lookup service presence.ss; }
ask_ss ss-right "$PASSWORD"
ask_ss ss-none none

get right "$PASSWORD"
get wrong "not-the-password"
get cancel cancel
get none none
START=$(date +%s)
get silent silent
echo "silent-seconds=$(( $(date +%s) - START ))"
grep -q "AUTHENTICATING FOR io.vaultd.user-presence" "$T/pane.silent" && echo "silent-prompted=yes"

# Attributes and searches are not gated: no agent, and the item shows its access control.
$AS_USER "$VAULTCTL" item get --service presence.example --account alice --json > "$T/out.json" 2> "$T/err.json"
report json $?
# Refused as SecItem refuses it: an access control on a synchronizable item (Param).
printf 'x' | $AS_USER "$VAULTCTL" item add --service sync.example --account bob \
  --require-presence --synchronizable --secret-stdin > "$T/out.sync" 2> "$T/err.sync"
report sync $?

# The grace window: one process reads twice on one connection; the agent answers the first
# read and is gone before the second.
twice() {
  name=$1
  rm -f "$T/in" && mkfifo -m 0666 "$T/in"
  start_held "$name" python3 -u "$T/reader.py" "$U/vaultd.sock"
  exec 7> "$T/in"
  agent "$name"
  echo go > "$T/go"
  wait_for "pane $name | grep -q Password:" && $TMUX send-keys -t "$name" "$PASSWORD" Enter
  wait_for "grep -q '^first' $T/out.$name" 60
  $TMUX kill-session -t "$name" 2>/dev/null
  echo second >&7
  exec 7>&-
  timeout 60 sh -c "while kill -0 $P 2>/dev/null; do sleep 0.05; done" || kill -9 $P
  wait $P
  report "$name" $?
}
cat > "$T/reader.py" <<'EOF'
# Two CopyMatching calls with returnData on one connection, the second when stdin says so.
import base64, json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def read(label):
    q = {"class": "genericPassword", "query": {"service": "presence.example",
         "account": "alice"}, "returnData": True}
    s.sendall(json.dumps({"method": "io.vaultd.Keychain.CopyMatching",
                          "parameters": q}).encode() + b"\0")
    buf = b""
    while not buf.endswith(b"\0"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    r = json.loads(buf[:-1])
    if "error" in r:
        print(label, r["error"])
    else:
        print(label, base64.b64decode(r["parameters"]["items"][0]["data"]).decode())
read("first")
sys.stdin.readline()
read("second")
EOF
twice grace
settings 0 8
kill -HUP $VD
wait_for "grep -q 'SIGHUP: settings reloaded' $T/vaultd.log" || fail "no reload"
twice nograce

# No polkitd (the bus has no one to start it), then no system bus at all: fails at once.
# (polkitd does not end on SIGTERM: SIGKILL.)
kill -9 $POLKITD
wait $POLKITD 2>/dev/null
get nopolkit none
kill -9 $SYSTEM_BUS
wait $SYSTEM_BUS 2>/dev/null
get nobus none
echo "done"
