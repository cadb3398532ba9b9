#!/usr/bin/env bash
# Installs the compare bench's reference loop (reference_loop.py): PyPI's
# Anthropic SDK in a venv of the system python. Idempotent: a finished install is
# left as it is. The bench reads the same directory: HARNESSD_BENCH_COMPARE,
# default /opt/harnessd-test/compare.
set -euo pipefail
dir=${HARNESSD_BENCH_COMPARE:-/opt/harnessd-test/compare}
sdk=anthropic==2.16.0
mkdir -p "$dir"
if [ ! -f "$dir/venv/.done-$sdk" ]; then
  rm -rf "$dir/venv"
  /usr/bin/python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "$sdk"
  touch "$dir/venv/.done-$sdk"
fi
