#!/usr/bin/env bash
# Every timing figure of BENCHMARKS.md (each section names its item), for a QUIET machine
# (load average below about 1.5): wall and CPU times, rates and latencies depend on the
# load, so run this only when nothing else runs. Deterministic figures (regrets, retirement
# counts, bests, coverages, mutation scores) are not here: they do not depend on the load,
# and their commands are in their sections.
#
# Usage, from the repository root:
#   benchmarks/rerun_timing_figures.sh [FIRST [LAST]]     # items FIRST..LAST (default 1..22)
#   BASELINE=/tmp/main-s9 benchmarks/rerun_timing_figures.sh   # the tree compared side by side
#   SIDE=1 BASELINE=/tmp/main-s9 benchmarks/rerun_timing_figures.sh 6 11   # under load
# With SIDE=1 every item whose benchmark has no --baseline of its own runs twice, here and
# then the same script of $BASELINE (cwd and PYTHONPATH that tree, same interpreter), one
# right after the other: on a loaded machine only such ratios mean anything (items 1, 5, 9
# and 12 compare side by side themselves).
# Output goes to $OUT (default /tmp/timing-figures/<item>.log) with the load average before
# and after each item; copy the figures into the section that names the item, with the
# date, the commit (git rev-parse --short HEAD) and the load average.
# Expected wall time of each item on a quiet 2-core machine is in its comment (session 10's
# run: 24 minutes for items 1 to 12, 38 with 13 to 15, 42 with 16 to 22).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
BASELINE=${BASELINE:-/tmp/main-s9}
SIDE=${SIDE:-0}
OUT=${OUT:-/tmp/timing-figures}
FIRST=${1:-1}
LAST=${2:-22}
mkdir -p "$OUT"
[ -d "$BASELINE" ] || echo "note: no baseline tree at $BASELINE (git archive <commit> | tar -x -C $BASELINE); items using it will fail"

item() {  # item N NAME COMMAND...
    local n=$1 name=$2
    shift 2
    if [ "$n" -lt "$FIRST" ] || [ "$n" -gt "$LAST" ]; then return; fi
    local log="$OUT/$(printf '%02d' "$n")-$name.log"
    {
        echo "== item $n $name: $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "\$ $*"
    } | tee "$log"
    "$@" 2>&1 | tee -a "$log"
    echo "== end of item $n: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
}

pair() {  # pair N NAME SCRIPT ARGS...: item N on this tree, then (SIDE=1) on $BASELINE
    local n=$1 name=$2 script=$3
    shift 3
    item "$n" "$name" "$PY" "benchmarks/$script" "$@"
    if [ "$SIDE" = 1 ]; then
        item "$n" "$name-baseline" env PYTHONPATH="$BASELINE" bash -c \
            'cd "$0" && exec "$1" "benchmarks/$2" "${@:3}"' "$BASELINE" "$PY" "$script" "$@"
    fi
}

# 1. Start-up, offline and to the first request, side by side with $BASELINE. ~2 min.
item 1 startup bash -c "cd benchmarks && $PY bench_startup.py --reps 9 --baseline $BASELINE"
# 2. Offline throughput, memory=v2 (default) and the no-memory arm. ~1 min.
pair 2 throughput-v2 bench_throughput.py
pair 2 throughput-none bench_throughput.py --set memory=none pipeline=guided
# 3. Offline search progress (best per seed is seeded; wall per run is the timing). ~5 min.
pair 3 progress-300 bench_progress.py
pair 3 progress-3000 bench_progress.py --mutants 3000 --seeds 0 1 2
pair 3 progress-heilbronn bench_progress.py --problem heilbronn --seeds 0 1 2
pair 3 progress-none bench_progress.py --set memory=none pipeline=guided
# 4. Decision latency and the memory kept per decision. ~1 min.
pair 4 decision-latency bench_decision_latency.py --sizes 100 1000 10000 --ledger 3000 --repeats 8
pair 4 ledger-footprint bench_ledger_footprint.py --sizes 100 1000
# 5. Memory v2 at scale: CPU per mutant against ledger length, side by side. ~1 min.
item 5 memory-scale bash -c "cd benchmarks && $PY bench_memory_scale.py --skip-run --cards 100 1000 --rows 1000 10000 --measure 20 --baseline $BASELINE --baseline-measure 20"
# 6. Card bank: ingest latency and index refresh (1,000 and 10,000 cards). ~10 s.
pair 6 memory-bank bench_memory_bank.py
# 7. Scratchpad cost (2,000 mutants x 3 settings x 4 repeats, memory=v2). ~7 min.
pair 7 scratchpad bench_scratchpad.py
# 8. Retirement sweep times (its counts are deterministic). ~2 min.
pair 8 retirement-sweep bench_retirement.py --cards 1000 --ledger 3000 --repeats 3
# 9. Sandbox overhead, side by side with the baseline tree. ~30 s (as root).
item 9 sandbox "$PY" benchmarks/bench_sandbox.py --n 200 --fresh-n 20 --baseline "$BASELINE" --layers
# 10. The timing claims moved out of the unit tests. ~10 s.
pair 10 timing-claims bench_timing_claims.py --repeats 2
# 11. Dashboard (a 10,000-mutant run, then page loads and polls). ~2 min.
pair 11 dashboard bench_dashboard.py
# 12. Remote models: loop time against a heavy-tailed server, CPU per request. ~3 min.
item 12 dispatch bash -c "cd benchmarks && $PY bench_dispatch.py --strict"
item 12 wire-cpu bash -c "cd benchmarks && $PY bench_wire_cpu.py --requests 300"
# 13. The same server with OpenEvolve 0.4.0 beside us (a scratch venv with openevolve==0.4.0,
#     never a dependency; OE=its python). ~3 min.
if [ -x "${OE:-/work/scratch/oe-venv/bin/python}" ]; then
    item 13 dispatch-openevolve bash -c "cd benchmarks && $PY bench_dispatch.py --strict --cells 8:none 8:v2 --openevolve ${OE:-/work/scratch/oe-venv/bin/python}"
fi
# 14. README command 1 (the main job) in an empty directory, with its peak memory. ~10 s.
item 14 readme bash -c "d=\$(mktemp -d) && cd \$d && /usr/bin/time -v $PY $PWD/run.py"
# 15. Memory v2 at scale: a real 10,000-mutant run, then 50,000-row ledgers. ~16 min.
item 15 memory-scale-run bash -c "cd benchmarks && $PY bench_memory_scale.py --skip-synthetic --mutants 10000"
item 15 memory-scale-50k bash -c "cd benchmarks && $PY bench_memory_scale.py --skip-run --cards 100 1000 --rows 1000 10000 50000 --measure 20"
# 16. Memory v2 at scale: decide and observe per call inside a 600-mutant run. ~15 s.
pair 16 memory-observe bench_memory_observe.py
# 17. Memory v2 at scale: RSS along a 5,000-mutant run and bytes kept per decision. ~3 min.
pair 17 footprint bench_footprint.py
# 18. Card bank: bytes and time per use-trial stamp and per card write. ~10 s.
pair 18 bank-writes bench_bank_writes.py
# 19. Memory v2 at scale: one head fit at 1,000 cards and 10,000 rows. ~15 s.
pair 19 head-fit bench_head_fit.py
# 20. Decision latency: the chance constraint's careful integral (its checks are seeded). ~10 s.
pair 20 careful-integral bench_careful_integral.py
# 21. Remote models: the run state a commit checkpoints. ~5 s.
pair 21 checkpoint bench_checkpoint.py
# 22. Remote models: a trickling server, no server, huge garbage answers. ~20 s.
pair 22 remote-failures bench_remote_failures.py
