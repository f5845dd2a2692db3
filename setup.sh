#!/usr/bin/env bash
# One-time set-up, safe to re-run: a project-local .venv with torch==2.13.0, safetensors and numpy
# (safetensors.torch needs it to write files), RestrictedPython (the course's Python) from PyPI (~4.7 GB with its CUDA libraries, about a minute to install on a fast link), then the
# `grade` binary built against that libtorch (target/debug/grade; a few minutes the first time).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
need_venv() {
  [ -x .venv/bin/python ] || return 0
  .venv/bin/python - <<'PY' 2>/dev/null && return 1 || return 0
import numpy, torch, safetensors.torch
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
PY
}
if need_venv; then
  echo "setup: creating .venv with torch==2.13.0 + safetensors + numpy (first time: ~4.7 GB) …" >&2
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 safetensors numpy
fi
# grade_jupyter (python/: `%grade` inside a notebook, docs/jupyter.md), editable; skipped once this
# version is installed.
gj=$(sed -n 's/^version = "\(.*\)"/\1/p' python/pyproject.toml)
if ! compgen -G ".venv/lib/python3*/site-packages/grade_jupyter-$gj.dist-info" >/dev/null; then
  echo "setup: installing grade_jupyter $gj (the %grade magic for notebooks) …" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e python 2>/dev/null ||
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e python
fi
# The course's Python (src/driver/policy.py) compiles submissions with RestrictedPython.
.venv/bin/python -c 'import RestrictedPython' 2>/dev/null ||
  .venv/bin/python -m pip install --quiet --disable-pip-version-check RestrictedPython==9.0
# A stable path to the wheel's libtorch for .cargo/config.toml (LIBTORCH), whatever the Python version.
torch_dir=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')
ln -sfn "$torch_dir" .venv/torch
echo "setup: building grade …" >&2
cargo build --quiet --bins
