#!/usr/bin/env bash
# The goals of adaptive `auto`, one after another, on the machine at hand,
# from the checkout this script is in (built in place): the hand-written
# phased programs, following a change, the learner's cost at 16 KiB, the
# per-call cost at 4 KiB and, with --generated N, N generated programs.
# Run it alone on a quiet machine; each step prints its own verdicts.
#
#   bash bench/goals.sh                      # the others: about 15-25 minutes
#   bash bench/goals.sh --generated 200 --json gen.json   # then hours more
#
# --generated N   also run N generated programs (a seed drawn at run time)
# --rounds R      their rounds (default 3)
# --json FILE     their samples (default: goals-generated.json here); an
#                 interrupted run goes on with
#                 python -m clearpages bench --programs --resume FILE
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}

generated=0 rounds=3 json=goals-generated.json
while [ $# -gt 0 ]; do
    case $1 in
        --generated) generated=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --json) json=$2; shift 2 ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "goals.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

step() {
    echo
    echo "== $* ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
}

step "the machine"
(cd "$root" && git rev-parse --short HEAD 2>/dev/null) || true
"$py" -m clearpages info | sed -n '1,20p'

step "hand-written phased programs: every cell >= 0.90 (cold then used 0.75)"
"$py" -m clearpages bench --programs --cases

step "following a change: 0.9 of the best within the budget"
"$py" "$root/bench/bench_relearn.py" --rounds 3

step "the learner's cost at 16 KiB warm: on/off <= 1.01"
"$py" "$root/bench/bench_adapt_cost.py"

step "per call at 4 KiB: auto <= 1.1x numpy.fill, explicit methods <= 1.2x auto"
"$py" "$root/bench/bench_percall.py"

if [ "$generated" -gt 0 ]; then
    step "$generated generated programs, $rounds rounds"
    "$py" -m clearpages bench --programs --generated "$generated" \
        --rounds "$rounds" --json "$json"
fi
step "done"
