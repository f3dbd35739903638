#!/usr/bin/env bash
# Idempotent set-up for bnb on Debian 12, run as root: system packages, the project's Python environment (.venv at
# the repository root), then builds bnb with Bazel and installs its wheel into .venv. Each step is skipped when
# already done, so a second run costs a Bazel no-op build.
#   --with-bitsandbytes-shim  also installs the companion `bitsandbytes` (tools/install_shim.sh) into .venv, so that
#                             transformers, peft and accelerate use bnb there (README: "bitsandbytes or bnb")
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
with_shim=0
for arg in "$@"; do
  case $arg in
    --with-bitsandbytes-shim) with_shim=1 ;;
    *) echo "[setup] unknown argument $arg (expected --with-bitsandbytes-shim)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*"; }

# --- system packages --------------------------------------------------------------------------------------------
packages=(bazel-bootstrap bazel-platforms bazel-rules-java g++ pkg-config python3-dev python3-venv
          libabsl-dev libhwy-dev libtomlplusplus-dev pybind11-dev libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "[setup] missing Debian packages: ${missing[*]}; run as root, or: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- Python environment -----------------------------------------------------------------------------------------
base_python=${BNB_BASE_PYTHON:-python3}
# A venv whose creation was interrupted may have a python but no pip: make it again rather than fail later.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  say "creating .venv with $("$base_python" --version)"
  "$base_python" -m venv --clear .venv
fi
stamp=".venv/.bnb-requirements-$(cat tools/requirements.txt tools/requirements-hf.txt | sha256sum | cut -c1-16)"
if [[ ! -f $stamp ]]; then
  say "installing tools/requirements.txt into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
  # The Hugging Face stack, for the end-to-end tests only: its failure leaves bnb usable (those tests skip, saying
  # why) and no stamp, so the next run tries again. tools/requirements.txt as constraints: torch stays as pinned.
  say "installing tools/requirements-hf.txt (transformers, peft, accelerate) into .venv"
  if .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements-hf.txt \
       -c tools/requirements.txt; then
    rm -f .venv/.bnb-requirements-* && touch "$stamp"
  else
    echo "[setup] warning: tools/requirements-hf.txt did not install; the end-to-end tests will skip" >&2
  fi
fi

# --- build and install bnb --------------------------------------------------------------------------------------
say "building bnb (bazel build //bnb/python:wheel)"
# A failed build must stop here: installing the wheel an earlier build left would demo and test stale code.
build_log=$(mktemp)
build_status=0
bazel build --noshow_progress //bnb/python:wheel >"$build_log" 2>&1 || build_status=$?
grep -vE '^(INFO|Loading|Analyzing|Target|  bazel-bin)|linux-sandbox' "$build_log" || true
rm -f "$build_log"
(( build_status == 0 )) || { echo "[setup] bazel build //bnb/python:wheel failed (output above)" >&2; exit 1; }
wheel=$(ls -t bazel-bin/bnb/python/bnb-*.whl 2>/dev/null | head -n1)
[[ -n $wheel && -f $wheel ]] || { echo "[setup] the wheel was not built" >&2; exit 1; }
sum=$(sha256sum "$wheel" | cut -c1-16)
if [[ ! -f .venv/.bnb-wheel-$sum ]]; then
  say "installing $(basename "$wheel") into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  rm -f .venv/.bnb-wheel-* && touch ".venv/.bnb-wheel-$sum"
fi
if ((with_shim)); then
  tools/install_shim.sh
fi
say "ready: $root/.venv/bin/python -c 'import bnb'"
