#!/bin/sh
# test-neon.sh -- build the kernel tests for AArch64 and run them under QEMU user emulation:
# the NEON table against the scalar reference, on an x86-64 host.
#
#   sh scripts/test-neon.sh          (from the repository root; `make test-neon` runs it)
#
# Needs Debian's gcc-aarch64-linux-gnu and qemu-user (qemu-aarch64). Builds static binaries
# from src/common.c, the aarch64 kernel files and tests/test_kernels.c and tests/test_qact.c
# (the int8-activation kernels, sdot and widening) into build-neon/, prints their PASS/FAIL
# lines and exits non-zero if any test failed. Overrides (own names, so
# a host CC/CFLAGS/BUILD in the environment cannot leak into the cross build):
# NEON_CC, NEON_CFLAGS, NEON_BUILD, NEON_QEMU, NEON_SYSROOT.
set -eu

CC=${NEON_CC:-aarch64-linux-gnu-gcc}
QEMU=${NEON_QEMU:-qemu-aarch64}
SYSROOT=${NEON_SYSROOT:-/usr/aarch64-linux-gnu}
BUILD=${NEON_BUILD:-build-neon}
CFLAGS=${NEON_CFLAGS:--O2 -g}
WARN="-std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-function"

cd "$(dirname "$0")/.."
for tool in "$CC" "$QEMU"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "FAIL test-neon: $tool not found (apt-get install gcc-aarch64-linux-gnu qemu-user)"
        exit 1
    fi
done

mkdir -p "$BUILD"
# The objects compile in parallel (one job each; there are eight), then the two tests link and
# run side by side.
pids=""
# Wait for the jobs in $pids; if one failed, say what (the argument) and stop.
wait_all() {
    for p in $pids; do wait "$p" || { echo "FAIL test-neon: $1"; exit 1; }; done
    pids=""
}
objs=""
for src in src/common.c src/kernels/scalar.c src/kernels/dispatch.c src/kernels/neon.c src/kernels/qact.c src/kernels/tiles.c \
    src/kernels/neon_qact.c src/kernels/neon_qact_dot.c; do
    obj="$BUILD/$(basename "$src" .c).o"
    isa=""
    [ "$src" = src/kernels/neon_qact_dot.c ] && isa="-march=armv8.2-a+dotprod" # as the Makefile
    # shellcheck disable=SC2086 # flag lists split on purpose
    $CC $WARN $CFLAGS $isa -Iinclude -Isrc -D_GNU_SOURCE -c "$src" -o "$obj" &
    pids="$pids $!"
    objs="$objs $obj"
done
wait_all "a kernel file did not compile"
for t in test_kernels test_qact; do
    # shellcheck disable=SC2086
    $CC $WARN $CFLAGS -Iinclude -Isrc -Itests -D_GNU_SOURCE -static tests/$t.c $objs -lm -o "$BUILD/$t" &
    pids="$pids $!"
done
wait_all "a test did not compile"

rc=0
for t in test_kernels test_qact; do
    "$QEMU" -L "$SYSROOT" "$BUILD/$t" >"$BUILD/$t.out" 2>&1 &
    pids="$pids $!"
done
for p in $pids; do wait "$p" || rc=$?; done
out=$(cat "$BUILD/test_kernels.out" "$BUILD/test_qact.out")
printf '%s\n' "$out"
p=$(printf '%s\n' "$out" | grep -c '^PASS ' || true)
f=$(printf '%s\n' "$out" | grep -c '^FAIL ' || true)
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
echo "neon: $p passed, $f failed"
[ -n "${TALLY:-}" ] && echo "$p $f" >> "$TALLY"
exit "$rc"
