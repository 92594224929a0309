#!/usr/bin/env bash
# Builds vaultd's libFuzzer targets (Fuzz/targets/*Fuzzer.swift, with AddressSanitizer) and
# runs each in turn, from its committed seed corpus (Fuzz/corpus/NAME/), for its share of a
# bounded time. One target per parser that reads what a hostile peer or file controls:
#
#   frame           varlink framing, JSON, call decoding, the IDL parser (Sources/VaultProtocol)
#   call            the call parser vaultd runs (JSON.parseCall, JSON.unescape, secure decoders)
#   plist           property-list import: XML, binary, OpenStep (PropertyListCodec)
#   backup          a restore's reading of a backup: age (Age.Reader, Age.decrypt), the archive
#   sync            sync segments, their records (members, removals, keys), acks, file names
#   secret-service  the Secret Service object paths a peer names (SecretServicePath)
#   git-credential  git-credential-vault's input (key=value lines, url=)
#   flatpak-info    a sandbox's /.flatpak-info (FlatpakInfo)
#   keyring         vaultctl's reader of gnome-keyring's keyring files
#
#   Fuzz/run.sh [SECONDS]     the whole run's fuzzing time, shared by weight (default 180;
#                             FUZZ_SECONDS); each target gets at least 5 s
#   FUZZ_TARGETS="call sync"  run only these
#   FUZZ_WORK                 work files (default /tmp/vaultd-fuzz); the instrumented
#                             VaultProtocol and VaultCore libraries there are rebuilt only
#                             when their sources change
#
# Prints each target's executions. Exits non-zero when a target cannot be built or run (this
# toolchain builds libFuzzer targets: one that cannot is a failure, not a skip), or when one
# finds a crash, leak or timeout (the input is kept in Fuzz/artifacts/; keep it as a seed in
# Fuzz/corpus/NAME/ once fixed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
total=${1:-${FUZZ_SECONDS:-180}}
work=${FUZZ_WORK:-/tmp/vaultd-fuzz}
lib=$work/lib
mkdir -p "$lib" Fuzz/artifacts
san=fuzzer,address
# The libraries unoptimised: an optimised VaultCore with AddressSanitizer takes many minutes to
# compile on 2 cores, a fuzzing run far less (FUZZ_OPT=-O for longer runs).
libopt=${FUZZ_OPT:--Onone}

fail() {
  echo "fuzz: FAILED: $*"
  exit 1
}

# The C modules: system libraries' module maps where they are, and one for CVaultSys (SwiftPM
# makes that target's), whose C file is compiled once with the same instrumentation.
printf 'module CVaultSys {\n  header "%s"\n  export *\n}\n' \
  "$PWD/Sources/CVaultSys/include/CVaultSys.h" >"$work/CVaultSys.modulemap"
cmodules=(-I Sources/CSodium -I Sources/CSQLite -I Sources/CTSS2 -I Sources/CGcrypt
  -Xcc -fmodule-map-file="$work/CVaultSys.modulemap")
clibs=(-lsodium -lsqlite3 -ltss2-esys -ltss2-tctildr -ltss2-rc -ltss2-mu)
if ! clang -c -O1 -g -fsanitize=fuzzer-no-link,address -I Sources/CVaultSys/include \
    Sources/CVaultSys/CVaultSys.c -o "$lib/CVaultSys.o" >"$work/cvaultsys.log" 2>&1; then
  sed 's/^/  /' "$work/cvaultsys.log" | head -20
  fail "cannot compile Sources/CVaultSys with -fsanitize=fuzzer-no-link (no libFuzzer here?)"
fi

sources() { find "$@" -name '*.swift' | sort; }

# library NAME DIR: DIR's sources as an instrumented static library and module
# (-enable-testing, for the targets' @testable imports), rebuilt when they change.
library() {
  local name=$1 dir=$2 stamp
  mapfile -t files < <(sources "$dir")
  stamp=$( (cat "${files[@]}" && echo "$san $libopt") | sha256sum | cut -c1-16)
  if [ -f "$lib/lib$name.a" ] && [ "$(cat "$lib/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    return
  fi
  echo "fuzz: building $name (-sanitize=$san)"
  rm -f "$lib/$name.stamp"
  if ! swiftc -sanitize=$san -parse-as-library $libopt -g -enable-testing -module-name "$name" \
      -emit-library -static -emit-module -emit-module-path "$lib/$name.swiftmodule" \
      -I "$lib" "${cmodules[@]}" "${files[@]}" -o "$lib/lib$name.a" >"$work/$name-build.log" 2>&1; then
    grep -v "Cannot export local symbol" "$work/$name-build.log" | tail -n 40
    fail "cannot build $name"
  fi
  echo "$stamp" >"$lib/$name.stamp"
}

# target NAME SOURCES...: a fuzzer of the target's harness with SOURCES, against the libraries
# (frame's is built with VaultProtocol's sources instead: it checks their internals).
target() {
  local name=$1 libs=(-L "$lib" -lVaultCore -lVaultProtocol)
  shift
  [ "$name" != frame ] || libs=()
  echo "fuzz: building $name"
  if ! swiftc -sanitize=$san -parse-as-library -O -g -module-name "Fuzz_${name//-/_}" \
      -I "$lib" "${cmodules[@]}" "$@" "${libs[@]}" "$lib/CVaultSys.o" \
      "${clibs[@]}" -o "$work/$name-fuzzer" >"$work/$name-build.log" 2>&1; then
    grep -v "Cannot export local symbol" "$work/$name-build.log" | tail -n 40
    fail "cannot build the $name target"
  fi
}

# run NAME SECONDS [MAX_LEN [SEEDS...]]: the target from a copy of its seeds, and SEEDS (runs
# never touch git).
run() {
  local name=$1 seconds=$2 maxlen=${3:-65536} corpus=$work/corpus/$1 log=$work/$1.log status
  shift $(($# < 3 ? $# : 3))
  mkdir -p "$corpus"
  cp Fuzz/corpus/"$name"/* "$@" "$corpus"/
  echo "fuzz: running $name for $seconds s"
  set +e
  LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
    "$work/$name-fuzzer" "$corpus" -max_total_time="$seconds" -max_len="$maxlen" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=Fuzz/artifacts/"$name"- -print_final_stats=1 \
    >"$log" 2>&1
  status=$?
  set -e
  local execs
  execs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}')
  if [ $status -ne 0 ] || [ -z "$execs" ]; then
    tail -n 60 "$log"
    fail "$name (exit $status) after ${execs:-no} executions; log: $log; artifacts in Fuzz/artifacts/"
  fi
  echo "fuzz: $name: $execs executions in $seconds s, no crash (corpus: $(ls "$corpus" | wc -l) inputs)"
}

# name:weight, in the order they run; the weights share `total`.
all=(frame:18 call:14 plist:14 backup:16 sync:14 secret-service:6 git-credential:8 flatpak-info:5
  keyring:5)
selected=${FUZZ_TARGETS:-}
weights=0
for t in "${all[@]}"; do
  if [ -z "$selected" ] || [[ " $selected " == *" ${t%%:*} "* ]]; then
    weights=$((weights + ${t##*:}))
  fi
done
[ $weights -gt 0 ] || fail "no target named in FUZZ_TARGETS=$selected"

library VaultProtocol Sources/VaultProtocol
library VaultCore Sources/VaultCore
for t in "${all[@]}"; do
  name=${t%%:*}
  if [ -n "$selected" ] && [[ " $selected " != *" $name "* ]]; then continue; fi
  seconds=$((total * ${t##*:} / weights))
  [ $seconds -ge 5 ] || seconds=5
  case $name in
    frame)
      # The harness checks VaultProtocol's internals: built with its sources, as one module.
      mapfile -t protocol < <(sources Sources/VaultProtocol)
      target frame "${protocol[@]}" Fuzz/targets/FrameFuzzer.swift
      # The interface descriptions too, for the IDL parser.
      run frame "$seconds" 65536 Sources/VaultProtocol/Interfaces/*.varlink
      ;;
    keyring)
      target keyring Sources/vaultctl/Commands/Import/GnomeKeyringFile.swift \
        Sources/vaultctl/Commands/Import/KeyringTextFile.swift Fuzz/targets/KeyringFileFuzzer.swift \
        -lgcrypt
      run keyring "$seconds"
      ;;
    call) target call Fuzz/targets/CallFuzzer.swift && run call "$seconds" ;;
    plist)
      # The real application plists of the test fixtures too, those under 32 KiB: a larger one
      # costs about a second an execution here (unoptimised, AddressSanitizer), and the
      # fixtures' own tests read them whole.
      target plist Fuzz/targets/PlistFuzzer.swift
      mapfile -t plists < <(find Tests/Fixtures/plist -name '*.plist' -size -32k | sort)
      run plist "$seconds" 65536 "${plists[@]}"
      ;;
    backup) target backup Fuzz/targets/BackupFuzzer.swift && run backup "$seconds" 262144 ;;
    sync) target sync Fuzz/targets/SyncFuzzer.swift && run sync "$seconds" 262144 ;;
    secret-service)
      target secret-service Sources/vaultd/SecretService/SecretServicePath.swift \
        Fuzz/targets/SecretServiceFuzzer.swift
      run secret-service "$seconds" 4096
      ;;
    git-credential)
      target git-credential Sources/git-credential-vault/CredentialInput.swift \
        Fuzz/targets/GitCredentialFuzzer.swift
      run git-credential "$seconds" 8192
      ;;
    flatpak-info)
      target flatpak-info Sources/vaultd/FlatpakInfo.swift Fuzz/targets/FlatpakInfoFuzzer.swift
      run flatpak-info "$seconds" 65536
      ;;
  esac
done
echo "fuzz: all targets ran, no crash"
