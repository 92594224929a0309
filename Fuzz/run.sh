#!/usr/bin/env bash
# Builds the frame/request/IDL fuzzer (Fuzz/FrameFuzzer.swift + Sources/VaultProtocol, with
# libFuzzer and AddressSanitizer) and runs it for a bounded time; then the same for vaultctl's
# reader of gnome-keyring's keyring files (Fuzz/KeyringFileFuzzer.swift), for a quarter of it.
#
#   Fuzz/run.sh [SECONDS]        default 60 (FUZZ_SECONDS); corpus in Fuzz/corpus (seeded)
#   FUZZ_KEYRING_SECONDS         the keyring fuzzer's time (default SECONDS / 4, at least 5)
#
# Prints the number of executions. Exits 0 when the toolchain has no libFuzzer runtime (with a
# message), non-zero when the fuzzer finds a crash (the input is kept in Fuzz/artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
seconds=${1:-${FUZZ_SECONDS:-60}}
work=${FUZZ_WORK:-/tmp/vaultd-fuzz}
mkdir -p "$work" Fuzz/artifacts
bin=$work/frame-fuzzer

# Is there a fuzzer runtime at all? Try the smallest possible target first.
probe=$work/probe
cat > "$probe.swift" <<'SWIFT'
@_cdecl("LLVMFuzzerTestOneInput") public func f(_ d: UnsafePointer<UInt8>, _ n: Int) -> CInt { 0 }
SWIFT
if ! swiftc -sanitize=fuzzer -parse-as-library "$probe.swift" -o "$probe" >"$work/probe.log" 2>&1; then
  echo "fuzz: SKIPPED: this toolchain cannot build libFuzzer targets (swiftc -sanitize=fuzzer failed):"
  sed 's/^/  /' "$work/probe.log" | head -5
  exit 0
fi

sanitizers=fuzzer,address
echo "fuzz: building $bin (-sanitize=$sanitizers)"
mapfile -t sources < <(find Sources/VaultProtocol -name '*.swift' | sort)
# VaultProtocol wipes and decodes secrets with libsodium: its module map and library. It reads
# C's stdout and stderr through CVaultSys's header (static inline functions, nothing to link);
# SwiftPM makes that target's module map, so here one is written.
printf 'module CVaultSys {\n  header "%s"\n  export *\n}\n' "$PWD/Sources/CVaultSys/include/CVaultSys.h" >"$work/CVaultSys.modulemap"
if ! swiftc -sanitize=$sanitizers -parse-as-library -O -g -module-name FrameFuzzer \
    -I Sources/CSodium -lsodium -Xcc -fmodule-map-file="$work/CVaultSys.modulemap" \
    "${sources[@]}" Fuzz/FrameFuzzer.swift -o "$bin" >"$work/build.log" 2>&1; then
  grep -v "Cannot export local symbol" "$work/build.log" | tail -n 40
  echo "fuzz: FAILED to build the fuzzer"
  exit 1
fi

# Seed corpus: well-formed calls and the shapes that matter (a copy, so runs never touch git).
corpus=$work/corpus
mkdir -p "$corpus"
cp Fuzz/seeds/* "$corpus"/ 2>/dev/null || true
# The interface descriptions, for the IDL parser.
cp Sources/VaultProtocol/Interfaces/*.varlink "$corpus"/

echo "fuzz: running for $seconds s"
log=$work/fuzz.log
set +e
LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
"$bin" "$corpus" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=Fuzz/artifacts/ -print_final_stats=1 >"$log" 2>&1
status=$?
set -e
tail -n 25 "$log" | grep -E "stat::|Done|ERROR|SUMMARY|crash|deadly|timeout" || true
execs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}')
if [ $status -ne 0 ]; then
  echo "fuzz: FAILED (exit $status) after ${execs:-?} executions; log: $log; artifacts in Fuzz/artifacts/"
  tail -n 60 "$log"
  exit 1
fi
echo "fuzz: ${execs:-?} executions in $seconds s, no crash (corpus: $(ls "$corpus" | wc -l) inputs)"

# vaultctl's keyring file reader: its two files with VaultProtocol's sources in one module
# (-D VAULT_FUZZ drops their `import VaultProtocol`) and libgcrypt (Sources/CGcrypt's module
# map). Seeds: an encrypted and a plain keyring written by gnome-keyring (Fuzz/keyring-seeds).
kbin=$work/keyring-fuzzer
kseconds=${FUZZ_KEYRING_SECONDS:-$(( seconds / 4 > 5 ? seconds / 4 : 5 ))}
echo "fuzz: building $kbin (-sanitize=$sanitizers)"
if ! swiftc -sanitize=$sanitizers -parse-as-library -O -g -module-name KeyringFileFuzzer -D VAULT_FUZZ \
    -I Sources/CSodium -I Sources/CGcrypt -lsodium -lgcrypt \
    -Xcc -fmodule-map-file="$work/CVaultSys.modulemap" \
    "${sources[@]}" Sources/vaultctl/Commands/Import/GnomeKeyringFile.swift \
    Sources/vaultctl/Commands/Import/KeyringTextFile.swift Fuzz/KeyringFileFuzzer.swift \
    -o "$kbin" >"$work/keyring-build.log" 2>&1; then
  grep -v "Cannot export local symbol" "$work/keyring-build.log" | tail -n 40
  echo "fuzz: FAILED to build the keyring file fuzzer"
  exit 1
fi
kcorpus=$work/keyring-corpus
mkdir -p "$kcorpus"
cp Fuzz/keyring-seeds/* "$kcorpus"/
echo "fuzz: running the keyring file fuzzer for $kseconds s"
klog=$work/keyring-fuzz.log
set +e
LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
"$kbin" "$kcorpus" -max_total_time="$kseconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=Fuzz/artifacts/ -print_final_stats=1 >"$klog" 2>&1
status=$?
set -e
kexecs=$(grep -E "^stat::number_of_executed_units" "$klog" | awk '{print $2}')
if [ $status -ne 0 ]; then
  echo "fuzz: keyring file fuzzer FAILED (exit $status) after ${kexecs:-?} executions; log: $klog; artifacts in Fuzz/artifacts/"
  tail -n 60 "$klog"
  exit 1
fi
echo "fuzz: keyring files: ${kexecs:-?} executions in $kseconds s, no crash (corpus: $(ls "$kcorpus" | wc -l) inputs)"
