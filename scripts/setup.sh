#!/usr/bin/env bash
# Everything a fresh machine needs: a virtualenv in .venv with the pinned packages and this
# project (editable), and, where we are root on Debian/Ubuntu, Slurm and munge for the local test
# cluster (scripts/slurm-local.sh) and Chromium for the report's browser test. Safe to rerun: it reinstalls only when requirements.txt or
# pyproject.toml change. Use PYTHON=/path/to/python3.11 to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v slurmctld >/dev/null; then
  bash scripts/slurm-local.sh install
fi
# headless Chromium, for the test that renders the report in a real browser
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v chromium >/dev/null; then
  echo "[setup] installing Debian's chromium (the report's browser test)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
fi

# the shared libraries opencv-python (the Push-T simulator's renderer) loads at import
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! ldconfig -p | grep -q 'libGL.so.1'; then
  echo "[setup] installing libgl1 and libglib2.0-0 (opencv-python)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgl1 libglib2.0-0 >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgl1 libglib2.0-0 >/dev/null; }
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($python --version)"
  "$python" -m venv .venv
fi

stamp=.venv/.iclr26-setup
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing pinned packages (first time: several minutes, torch is large)"
  .venv/bin/pip install --disable-pip-version-check -q -r requirements.txt
  .venv/bin/pip install --disable-pip-version-check -q --no-deps -e .
  echo "$want" > "$stamp"
fi
echo "[setup] ready: $(.venv/bin/python --version), $(.venv/bin/snakemake --version | head -1) snakemake"
