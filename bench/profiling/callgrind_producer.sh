#!/usr/bin/env bash
# Instructions per record of a whole producer process (bench/profiling/profile_send.py) under
# callgrind, against a running broker.
#
#   AIOPRODUCER_BOOTSTRAP=127.0.0.1:PORT bench/profiling/callgrind_producer.sh SCENARIO [RECORDS] [profile_send options...]
#
# Runs `python -m bench.profiling.profile_send --scenario SCENARIO` under
# `valgrind --tool=callgrind` with RECORDS (default 20000) and 2 x RECORDS records, each
# on a topic created beforehand (outside the profile), and prints
# (instructions(2N) - instructions(N)) / N: interpreter start-up, imports, connecting and
# closing cancel out. The client runs ~50x slower under callgrind, so it fills batches
# differently from a native run: compare figures of the same scenario, before and
# after a change. The callgrind files are kept (printed) for callgrind_annotate.
set -euo pipefail

cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
SCENARIO="${1:?usage: $0 SCENARIO [RECORDS] [profile_send options...]}"
shift
RECORDS="${1:-20000}"
shift || true
if ! [[ "$RECORDS" =~ ^[0-9]+$ ]] || [ "$RECORDS" -le 0 ]; then
    echo "usage: $0 SCENARIO [RECORDS] [profile_send options...]" >&2
    exit 2
fi
: "${AIOPRODUCER_BOOTSTRAP:?set AIOPRODUCER_BOOTSTRAP to a running broker}"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

OUT="$(mktemp -d -t aioproducer-callgrind-producer-XXXXXX)"

topic() {  # creates a topic for SCENARIO, prints its name
    "$PYTHON" - "$SCENARIO" <<'EOF'
import os, sys, uuid
from bench.broker import Admin
from bench.common import SCENARIOS
sc = SCENARIOS[sys.argv[1]]
name = f"callgrind-{sc.name}-{uuid.uuid4().hex[:8]}"
Admin(os.environ["AIOPRODUCER_BOOTSTRAP"]).create_topic(name, sc.partitions)
print(name)
EOF
}

drop() {
    "$PYTHON" - "$1" <<'EOF' || true
import os, sys
from bench.broker import Admin
Admin(os.environ["AIOPRODUCER_BOOTSTRAP"]).delete_topic(sys.argv[1])
EOF
}

collected() {  # $1 = records; prints the total instruction count (Ir)
    local n="$1" t
    shift
    t="$(topic)"
    if ! timeout 900 valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$n.out" \
            "$PYTHON" -m bench.profiling.profile_send --scenario "$SCENARIO" --records "$n" \
            --topic "$t" "$@" >"$OUT/stdout.$n" 2>"$OUT/valgrind.$n.log"; then
        drop "$t"
        echo "profile_send failed under callgrind; see $OUT/valgrind.$n.log:" >&2
        grep -v '^==' "$OUT/valgrind.$n.log" | tail -5 >&2
        exit 1
    fi
    drop "$t"
    local ir
    ir="$(sed -n 's/.*Collected : *\([0-9][0-9]*\).*/\1/p' "$OUT/valgrind.$n.log" | tail -1)"
    [ -n "$ir" ] || { echo "no 'Collected' line; see $OUT/valgrind.$n.log" >&2; exit 1; }
    echo "$ir"
}

ONE="$(collected "$RECORDS" "$@")" || exit 1
TWO="$(collected "$((2 * RECORDS))" "$@")" || exit 1
"$PYTHON" - "$SCENARIO" "$RECORDS" "$ONE" "$TWO" "$OUT" <<'EOF'
import sys
sc, n, one, two, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"{sc}: {one:,} instructions for {n:,} records, {two:,} for {2 * n:,}")
print(f"instructions per record: {(two - one) / n:,.1f}")
print(f"callgrind output: {out}")
EOF
