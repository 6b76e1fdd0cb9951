# What tests/fuzz/run and tests/fuzz/sanitize share: sourced, not run. Sets here, root and out
# (build-fuzz/, or FUZZ_BUILD), and the symbolizer for the sanitizers' reports.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD:-$root/build-fuzz}
cxx=${FUZZ_CXX:-clang++-16}
# Debian's clang-16 runtime looks for llvm-symbolizer-16 only (package llvm-16, not installed by
# scripts/install-deps); any llvm-symbolizer will do. Without one, reports give module+offset.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-16 || command -v llvm-symbolizer || true)
  [ -n "$ASAN_SYMBOLIZER_PATH" ] && export ASAN_SYMBOLIZER_PATH || unset ASAN_SYMBOLIZER_PATH
fi

# fuzz_build TARGET: configures tests/fuzz into $out and builds TARGET (fuzzers or sanitized) with
# FUZZ_JOBS jobs (default: the cores); the build's output is shown when it fails.
fuzz_build() {
  command -v "$cxx" >/dev/null ||
    { echo "fuzz: $cxx not found (scripts/install-deps installs clang-16 and libfuzzer-16-dev)" >&2; exit 1; }
  cmake -S "$here" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
  cmake --build "$out" --target "$1" -j "${FUZZ_JOBS:-$(nproc)}" >"$out/build-$1.log" 2>&1 ||
    { tail -n 40 "$out/build-$1.log" >&2; echo "fuzz: building $1 failed (all of it in $out/build-$1.log)" >&2; exit 1; }
}
