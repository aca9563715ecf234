#!/usr/bin/env bash
# Instructions per record of the native hot path (bench/profiling/native_micro.py) under callgrind.
#
#   bench/profiling/callgrind_native.sh [RECORDS] [extra native_micro.py options...]
#
# SCRIPT=bench/profiling/appender_micro.py measures the native path of Producer.send() instead
# (Appender.append: partition choice, murmur2, append, RecordFuture).
#
# Runs native_micro.py (or $SCRIPT) twice under `valgrind --tool=callgrind`, with RECORDS (default
# 100000) and 2 x RECORDS records, one timed pass each and no warm-up, and prints
# (instructions(2N) - instructions(N)) / N: the interpreter's start-up and imports cancel
# out. Deterministic, unlike ns/record. The callgrind output files are kept in a temp
# directory (printed) for callgrind_annotate.
set -euo pipefail

cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
SCRIPT="${SCRIPT:-bench/profiling/native_micro.py}"
RECORDS="${1:-100000}"
shift || true
if ! [[ "$RECORDS" =~ ^[0-9]+$ ]] || [ "$RECORDS" -le 0 ]; then
    echo "usage: $0 [RECORDS] [native_micro.py options...]" >&2
    exit 2
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

OUT="$(mktemp -d -t aioproducer-callgrind-XXXXXX)"

collected() {  # $1 = records; prints the total instruction count (Ir)
    local n="$1"
    shift
    if ! timeout 600 valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$n.out" \
            "$PYTHON" "$SCRIPT" --records "$n" --repeat 1 --no-warmup "$@" \
            >"$OUT/stdout.$n" 2>"$OUT/valgrind.$n.log"; then
        echo "$SCRIPT failed under callgrind; see $OUT/valgrind.$n.log:" >&2
        grep -v '^==' "$OUT/valgrind.$n.log" | tail -5 >&2
        exit 1
    fi
    local ir
    ir="$(sed -n 's/.*Collected : *\([0-9][0-9]*\).*/\1/p' "$OUT/valgrind.$n.log" | tail -1)"
    if [ -z "$ir" ]; then
        echo "no 'Collected' line from callgrind; see $OUT/valgrind.$n.log" >&2
        exit 1
    fi
    echo "$ir"
}

ONE="$(collected "$RECORDS" "$@")" || exit 1
TWO="$(collected "$((2 * RECORDS))" "$@")" || exit 1
"$PYTHON" - "$RECORDS" "$ONE" "$TWO" "$OUT" <<'EOF'
import sys
n, one, two, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(f"callgrind: {one:,} instructions for {n:,} records, {two:,} for {2 * n:,}")
print(f"instructions per record: {(two - one) / n:,.1f}")
print(f"callgrind output: {out}")
EOF
