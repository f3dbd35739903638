#!/usr/bin/env bash
# Installs, on request, the companion distribution `bitsandbytes` (bitsandbytes' API forwarded to bnb), so that
# transformers, peft and accelerate run their bitsandbytes recipes on bnb. Builds //bnb/python:bitsandbytes_wheel
# (unless --wheel names one) and installs it into .venv, another environment (--python) or a directory (--target).
# Refuses where a real bitsandbytes is installed there: pip sees one distribution named bitsandbytes and would
# replace it. --uninstall takes the companion out again (and never a real bitsandbytes).
#
#   tools/install_shim.sh [--python PYTHON] [--target DIR] [--wheel FILE] [--uninstall]
set -euo pipefail
cd "$(dirname "$0")/.."

python=.venv/bin/python target= wheel= uninstall=0
while (($#)); do
  case $1 in
    --python) python=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    *) echo "install_shim: unknown argument $1 (expected --python PYTHON, --target DIR, --wheel FILE, --uninstall)" >&2
       exit 2 ;;
  esac
done
where=${target:-the environment of $python}

# Every bitsandbytes distribution there, one line each: "<version> <location>".
installed=$("$python" - "$target" <<'EOF'
import importlib.metadata as md, sys
dists = md.distributions(path=[sys.argv[1]]) if sys.argv[1] else md.distributions()
for d in dists:
    if (d.metadata["Name"] or "").lower() == "bitsandbytes":
        print(d.version, d.locate_file(""))
EOF
)
real=$(grep -v '+bnb' <<<"$installed" || true)
if [[ -n $real ]]; then
  echo "install_shim: a real bitsandbytes is installed in $where: $real." >&2
  echo "  The companion would replace it (pip sees one distribution named bitsandbytes); choose one (README:" >&2
  echo "  'bitsandbytes or bnb'): pip uninstall bitsandbytes there first to run the Hugging Face stack on bnb." >&2
  exit 1
fi

if ((uninstall)); then
  if [[ -z $installed ]]; then echo "install_shim: no companion installed in $where"; exit 0; fi
  if [[ -n $target ]]; then
    rm -rf "$target/bitsandbytes" "$target"/bitsandbytes-*+bnb*.dist-info
  else
    "$python" -m pip uninstall -q -y bitsandbytes
  fi
  echo "install_shim: removed the companion bitsandbytes ($installed) from $where"
  exit 0
fi

# bnb must be this repository's (PyPI's "bnb" is another project): the companion forwards to it.
if [[ -z $target ]] && ! "$python" -c 'import bnb; bnb.__bitsandbytes_version__' 2>/dev/null; then
  echo "install_shim: bnb is not installed in $where (tools/setup.sh installs it into .venv); the companion" \
       "forwards to it" >&2
  exit 1
fi

if [[ -z $wheel ]]; then
  bazel build --noshow_progress //bnb/python:bitsandbytes_wheel 2>&1 | grep -E '^(ERROR|FAILED)' >&2 || true
  wheel=$(ls -t bazel-bin/bnb/python/bitsandbytes-*+bnb*.whl 2>/dev/null | head -n1)
  [[ -n $wheel ]] || { echo "install_shim: bazel build //bnb/python:bitsandbytes_wheel made no wheel" >&2; exit 1; }
fi
# --no-deps: the wheel names no dependencies, and nothing is to come from PyPI.
"$python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
  ${target:+--target "$target" --upgrade} "$wheel"
echo "install_shim: installed $(basename "$wheel") into $where"
