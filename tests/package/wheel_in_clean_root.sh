#!/usr/bin/env bash
# Checks the ckpt wheel the way a user meets it: in a clean Debian root (python3, python3-venv and ca-certificates,
# nothing of the build), as the unprivileged user ckpt, with no CKPT_* variable, the wheel pip-installed into a venv
# beside jax, jaxlib, numpy and ml_dtypes at requirements.txt's versions. Then: the package finds the library it
# carries; numpy saves on 2 ranks of the wheel's ckpt-launch and restores resharded on 3; JAX saves from 2
# processes (data=2 x model=2) and restores in 1 (model=4); a save from inside jax.jit through the FFI handler;
# the `ckpt` tool's ls, verify and export; README.md's JAX quick start, as pasted; with the ucx-cu12 extra, the
# resharded numpy restore exchanging over UCX from NVIDIA's wheel. Every restore is checked element by element. Stops at the first failure, with that step's output. The root is removed at the end unless KEEP_ROOT=1.
#
# Usage: tests/package/wheel_in_clean_root.sh DIST_DIR ROOT
#   DIST_DIR  holds exactly one ckpt-*.whl (tools/package.sh's output: build-package/dist)
#   ROOT      where to make the clean root (replaced if present); needs root on the host (tools/clean_root.sh)
set -euo pipefail

readonly REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly CLEAN_ROOT=$REPO/tools/clean_root.sh
readonly CHECKS=$REPO/tests/package/wheel_checks
readonly STEPS=8
readonly TIMEOUT_S=180  # per multi-process job: a hang fails its step

die() { echo "wheel_in_clean_root.sh: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || { sed -n '10,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
readonly DIST_DIR=$1 ROOT=$2
shopt -s nullglob
wheels=("$DIST_DIR"/ckpt-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected exactly one ckpt-*.whl in $DIST_DIR, found ${#wheels[@]}"
readonly WHEEL=${wheels[0]}
readonly WHEEL_NAME=$(basename "$WHEEL")

STAGING=$(mktemp -d -t wheel-in-clean-root.XXXXXX)
readonly STAGING
cleanup() {
  rm -rf "$STAGING"
  if [[ ${KEEP_ROOT:-0} == 1 ]]; then
    echo "KEEP_ROOT=1: the root stays at $ROOT (enter it: $CLEAN_ROOT run $ROOT -- bash)"
  elif [[ -d $ROOT ]]; then
    rm -rf --one-file-system "$ROOT"
  fi
}
trap cleanup EXIT

step_number=0
# step DESCRIPTION COMMAND...: runs COMMAND with its output in a log; prints "[n/8] DESCRIPTION: <its last line>",
# or, when it fails, its output and stops. COMMAND runs under `if`, where set -e does not apply: the functions
# below return their failures themselves.
step() {
  local description=$1; shift
  step_number=$((step_number + 1))
  local log=$STAGING/step-$step_number.log started=$SECONDS
  if ! "$@" >"$log" 2>&1; then
    echo "[$step_number/$STEPS] FAILED: $description. Its output:" >&2
    tail -n 60 "$log" >&2
    die "step $step_number failed: $description"
  fi
  echo "[$step_number/$STEPS] $description ($((SECONDS - started)) s): $(tail -n 1 "$log")"
}

# in_root SCRIPT: runs the bash SCRIPT inside the root as ckpt, in the venv, from the checks' folder.
in_root() {
  "$CLEAN_ROOT" run "$ROOT" -- bash -c "set -euo pipefail; . ~/venv/bin/activate; cd ~/wheel_checks; $1"
}

# The glibc a manylinux wheel requires, from its platform tag (manylinux_2_28_x86_64 -> 2.28).
required_glibc() {
  local tag=${WHEEL_NAME%.whl}
  tag=${tag##*-}
  [[ $tag =~ ^manylinux_([0-9]+)_([0-9]+)_ ]] || die "$WHEEL_NAME is not a manylinux wheel (platform tag $tag)"
  echo "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
}

install_into_venv() {
  "$CLEAN_ROOT" run "$ROOT" --copy "$WHEEL" /home/ckpt --copy "$REPO/requirements.txt" /home/ckpt -- bash -c "
    set -euo pipefail
    python3 -m venv ~/venv
    # requirements.txt as constraints: its versions of these and of their dependencies, without copying numbers.
    ~/venv/bin/pip install --quiet --constraint ~/requirements.txt jax jaxlib numpy ml_dtypes
    ~/venv/bin/pip install --quiet --constraint ~/requirements.txt ~/$WHEEL_NAME
    echo \"$WHEEL_NAME, $(stat -c %s "$WHEEL") B, needs glibc >= $REQUIRED_GLIBC (the root has \$(getconf GNU_LIBC_VERSION)); \
installed with \$(~/venv/bin/pip list --format=freeze | grep -E '^(jax|jaxlib|numpy|ml.dtypes)==' | tr '\n' ' ')\""
}

copy_checks() {
  "$CLEAN_ROOT" run "$ROOT" --copy "$CHECKS" /home/ckpt --copy "$STAGING/readme" /home/ckpt -- \
    mkdir /home/ckpt/out
}

# Saves on 2 ranks, restores on 3; the ranks' counts of checked elements must add up to the arrays' whole.
numpy_reshard() {
  local log=$STAGING/numpy_load.log
  in_root "ckpt-launch -n 2 --timeout $TIMEOUT_S -- python numpy_save.py ~/out
           ckpt-launch -n 3 --timeout $TIMEOUT_S -- python numpy_load.py ~/out" >"$log" 2>&1 || {
    cat "$log"; echo "the numpy save or restore failed"; return 1; }
  cat "$log"
  # Lines "rank R/3: restored column blocks, CHECKED of TOTAL elements equal".
  awk '/elements equal$/ { checked += $(NF - 4); total = $(NF - 2) }
       END { if (total == 0 || checked != total) { print "the ranks checked " checked " of " total " elements"; exit 1 }
             print "the 3 ranks checked all " total " elements" }' "$log"
}

# The wheel's ucx-cu12 extra installed, then numpy_reshard's save and restore with the exchange forced onto UCX.
ucx_from_its_wheel() {
  in_root "pip install --quiet --constraint ~/requirements.txt ~/'$WHEEL_NAME[ucx-cu12]'
           export CKPT_TRANSPORT=ucx
           ckpt-launch -n 2 --timeout $TIMEOUT_S -- python numpy_save.py ~/out-ucx
           ckpt-launch -n 3 --timeout $TIMEOUT_S -- python ucx_load.py ~/out-ucx" >"$STAGING/ucx.log" 2>&1 || {
    cat "$STAGING/ucx.log"; echo "the save or the restore over the libucx wheel's UCX failed"; return 1; }
  cat "$STAGING/ucx.log"
  [[ $(grep -c 'received over UCX from' "$STAGING/ucx.log") -eq 3 ]] || {
    echo "not every one of the 3 ranks exchanged over the libucx wheel's UCX"; return 1; }
  echo "pip install ckpt[ucx-cu12]: the 3 ranks of the resharded restore exchanged over $(
    grep -o 'from .*' "$STAGING/ucx.log" | head -1 | cut -c6-)"
}

readme_quickstart() {
  in_root "cd ~/readme && bash quickstart.sh" >"$STAGING/quickstart.log" 2>&1 || {
    cat "$STAGING/quickstart.log"; echo "quickstart.sh exited non-zero"; return 1; }
  local expected
  for expected in "2 process(es), 4 devices: resumed from None, now at step 3" \
                  "1 process(es), 4 devices: resumed from 3, now at step 6"; do
    grep -qF "$expected" "$STAGING/quickstart.log" || {
      cat "$STAGING/quickstart.log"; echo "README quick start: no line '$expected' in its output"; return 1; }
  done
  echo "README quick start, as pasted: $(grep -F 'process(es)' "$STAGING/quickstart.log" | tr '\n' ' ')"
}

REQUIRED_GLIBC=$(required_glibc)
readonly REQUIRED_GLIBC
python3 "$CHECKS/readme_quickstart.py" "$REPO/README.md" "$STAGING/readme"
echo "clean root at $ROOT (python3, python3-venv, ca-certificates), wheel $WHEEL"
"$CLEAN_ROOT" create "$ROOT" python3 python3-venv ca-certificates >"$STAGING/create.log" 2>&1 \
  || { cat "$STAGING/create.log" >&2; die "could not create the clean root at $ROOT"; }
copy_checks

step "venv with requirements.txt's jax, jaxlib, numpy, ml_dtypes, then the wheel" install_into_venv
step "import ckpt without CKPT_* finds the library inside the venv" \
  in_root "python import_check.py $(cut -d- -f2 <<<"$WHEEL_NAME")"
step "numpy: saved on 2 ranks (ckpt-launch), restored resharded on 3" numpy_reshard
step "JAX: saved by 2 processes (data=2 x model=2), restored by 1 (model=4), every element checked" \
  in_root "python jax_processes.py 2 2 $TIMEOUT_S jax_save.py ~/out
           python jax_processes.py 1 4 $TIMEOUT_S jax_restore.py ~/out"
step "JAX: saved from inside jax.jit through the FFI handler (JitSaver), restored and checked" \
  in_root "python jax_processes.py 1 4 $TIMEOUT_S jit_save.py ~/out"
step "ckpt CLI: ls, verify, export" in_root "python cli_checks.py ~/out"
step "README.md's JAX quick start on 2 processes, then 1" readme_quickstart
step "numpy over UCX from NVIDIA's wheel (the ucx-cu12 extra): saved on 2 ranks, restored resharded on 3" \
  ucx_from_its_wheel
echo "all $STEPS steps passed"
