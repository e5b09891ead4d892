#!/usr/bin/env bash
# Validate a scratchpad design report, or lint a scratchpad file, against the
# offline contracts in assets/manifest.json (see docs/scratchpad.md).
#
#   scripts/check.sh REPORT.json            # exit 0: passes; 1: one line per violation
#   scripts/check.sh --scratchpad FILE      # same for a .agent/scratchpad.md file
#                                           # exit 2: usage error (bad arguments, no such file)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$python" ]; then
    python="$(command -v python3)"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m gigaevo.scratchpad.checker --assets "$root/assets" "$@"
