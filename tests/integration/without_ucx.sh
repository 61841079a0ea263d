#!/usr/bin/env bash
# Runs a command on a machine without UCX: usage without_ucx.sh COMMAND [ARGS...]. In a private mount namespace,
# an overlay over each directory holding UCX's libraries deletes them there, so that dlopen("libucp.so.0") finds
# nothing, as where UCX was never installed; the host's files stay untouched. Exits 77 (skipped) where this process
# may not make a mount namespace or an overlay (not root, or a container that forbids them).
set -euo pipefail

if [ "${CKPT_IN_UCX_FREE_NAMESPACE:-}" != 1 ]; then
  if ! unshare --mount --propagation private true 2>/dev/null; then
    echo "without_ucx.sh: cannot make a mount namespace here (needs root): skipped" >&2
    exit 77
  fi
  CKPT_IN_UCX_FREE_NAMESPACE=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

scratch=$(mktemp -d)
mount -t tmpfs ckpt-without-ucx "$scratch" || { echo "without_ucx.sh: cannot mount a tmpfs here: skipped" >&2; exit 77; }
directories=$(ldconfig -p | awk '/libuc[pstm]\.so/ {print $NF}' | xargs -r -n1 readlink -f | xargs -r -n1 dirname |
              sort -u)
layer=0
for directory in $directories; do
  layer=$((layer + 1))
  mkdir -p "$scratch/$layer/upper" "$scratch/$layer/work"
  if ! mount -t overlay ckpt-without-ucx -o "lowerdir=$directory,upperdir=$scratch/$layer/upper,workdir=$scratch/$layer/work" \
       "$directory" 2>/dev/null; then
    echo "without_ucx.sh: cannot mount an overlay on $directory here: skipped" >&2
    exit 77
  fi
  rm -f "$directory"/libuc[pstm].so*
done
if ls /usr/lib/*/libucp.so* /usr/lib/libucp.so* /lib/*/libucp.so* >/dev/null 2>&1; then
  echo "without_ucx.sh: libucp is still visible" >&2
  exit 1
fi
"$@"
