#!/usr/bin/env bash
# Builds ckpt and runs its tests; exits non-zero if any fails. With no argument it runs every stage, as CI does:
#   normal  the build in build/ (or $CKPT_BUILD_DIR) and every test, the Python ones with the oldest supported JAX
#   newest-jax  the Python tests (label python) of the normal build again, in a second virtual environment
#           (<build>/venv-newest-jax) with the newest JAX that requirements.txt pins, which needs Python 3.12 or later:
#           $CKPT_NEWEST_JAX_PYTHON, else python3.12 or a later one on the PATH or in pyenv
#   asan    a clang build under AddressSanitizer and UndefinedBehaviorSanitizer in <build>-asan, every test that can
#           run instrumented, and each libFuzzer target fuzzing for a few seconds
#   tsan    a clang build under ThreadSanitizer in <build>-tsan, the unit tests of the threaded parts and the
#           multi-rank scenarios, with I/O worker processes and with I/O threads
#   package what ckpt ships (tools/package.sh, in <build>-package: the sdist, the wheel built from it, the .deb and
#           the .tar.gz), each installed and used in a clean Debian root file system that has none of the build
# Name stages to run only those: `tools/test.sh normal`. Every build has the test-only fault hooks except tsan's,
# which checks that a build without the option carries none.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_BUILD_DIR:-$repo/build}
build_type=${CKPT_BUILD_TYPE:-Release}
stages=("$@")
[ "${#stages[@]}" -gt 0 ] || stages=(normal newest-jax asan tsan package)

bash "$repo/tools/deps.sh"
python=$(bash "$repo/tools/python_env.sh" "$build/venv")

# configure DIR CMAKE_ARGS...: Ninja when available for a new build directory.
configure() {
  local dir=$1
  shift
  local generator=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  cmake -S "$repo" -B "$dir" "${generator[@]}" -DPython3_EXECUTABLE="$python" "$@"
}

# newest_jax_python: an interpreter new enough for the newest JAX (Python 3.12 or later); fails naming what it tried.
newest_jax_python() {
  local candidates=(python3.14 python3.13 python3.12) candidate
  if [ -n "${CKPT_NEWEST_JAX_PYTHON:-}" ]; then
    candidates=("$CKPT_NEWEST_JAX_PYTHON")
  elif command -v pyenv >/dev/null 2>&1; then
    candidates+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
  fi
  for candidate in "${candidates[@]}"; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  echo "test.sh: the newest JAX needs Python 3.12 or later; none found (tried ${candidates[*]}); set" \
    "CKPT_NEWEST_JAX_PYTHON" >&2
  return 1
}

# Under sanitizers a report fails the test that made it, with a whole stack.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

for stage in "${stages[@]}"; do
  echo "=== test.sh: stage $stage ==="
  SECONDS=0
  case "$stage" in
    normal)
      configure "$build" -DCMAKE_BUILD_TYPE="$build_type" -DCKPT_FAULT_INJECTION=ON
      cmake --build "$build" -j "$(nproc)"
      ctest --test-dir "$build" --output-on-failure -j2 ;;
    newest-jax)
      # requirements.txt's markers give the build's environment the oldest JAX only below Python 3.12.
      "$python" -c 'import sys; sys.exit(sys.version_info >= (3, 12))' ||
        { echo "test.sh: $python is Python 3.12 or later, which gets the newest JAX: the oldest goes untested" >&2
          exit 1; }
      newest_python=$(newest_jax_python)
      newest_python=$(bash "$repo/tools/python_env.sh" "$build/venv-newest-jax" "$newest_python")
      # An environment made earlier by an older Python would hold the oldest JAX (requirements.txt's markers).
      "$newest_python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' ||
        { echo "test.sh: $build/venv-newest-jax has a Python older than 3.12: remove it" >&2; exit 1; }
      "$newest_python" -c 'import jax; print("test.sh: JAX", jax.__version__)'
      configure "$build" -DCMAKE_BUILD_TYPE="$build_type" -DCKPT_FAULT_INJECTION=ON
      cmake --build "$build" -j "$(nproc)"
      CKPT_TEST_PYTHON=$newest_python ctest --test-dir "$build" --output-on-failure -j2 --no-tests=error \
        -L '^python$' ;;
    asan)
      CC=clang CXX=clang++ configure "$build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_FAULT_INJECTION=ON \
        -DCKPT_SANITIZE=address,undefined
      cmake --build "$build-asan" -j "$(nproc)"
      ctest --test-dir "$build-asan" --output-on-failure -j2 ;;
    tsan)
      CC=clang CXX=clang++ configure "$build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_FAULT_INJECTION=OFF \
        -DCKPT_SANITIZE=thread
      cmake --build "$build-tsan" -j "$(nproc)" --target ckpt_unit_tests ckpt-io-worker ckpt ckpt-launch \
        ckpt_scenario_core ckpt_scenario_async ckpt_scenario_exchange ckpt_scenario_control ckpt_manifest_tamper \
        ckpt_scenario_replicas ckpt_scenario_compress ckpt_scenario_reads ckpt_s3_tests
      # The tests labelled threaded where they are defined: the unit suites of code that runs on several threads
      # (tests/CMakeLists.txt) and the multi-rank scenarios (tests/integration.cmake); then those labelled
      # rank_io_threads again with the I/O threads inside each rank, where TSan sees them (not in worker processes).
      ctest --test-dir "$build-tsan" --output-on-failure -j2 --no-tests=error -L '^threaded$'
      CKPT_IO_WORKERS=0 ctest --test-dir "$build-tsan" --output-on-failure -j2 --no-tests=error -L '^threaded$' \
        -L '^rank_io_threads$'
      ctest --test-dir "$build-tsan" --output-on-failure --no-tests=error -R '^library_fault_hooks_absent$' ;;
    package)
      bash "$repo/tools/package.sh" "$build-package"
      bash "$repo/tests/package/wheel_in_clean_root.sh" "$build-package/dist" "$build-package/wheel-root"
      bash "$repo/tests/package/deb_in_clean_root.sh" "$build-package/dist" "$build-package/deb-root" ;;
    *)
      echo "test.sh: unknown stage '$stage' (normal, newest-jax, asan, tsan, package)" >&2
      exit 2 ;;
  esac
  echo "=== test.sh: stage $stage passed in ${SECONDS} s ==="
done
