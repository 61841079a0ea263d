#!/usr/bin/env bash
# Makes clean Debian bookworm root file systems with mmdebstrap and runs commands inside them, as an unprivileged
# user, so that packages can be tested on a system that has nothing of the build machine.
#
# Usage:
#   tools/clean_root.sh create ROOT [PACKAGE...]
#       A fresh bookworm root in ROOT (removed first if present) holding the given Debian packages, a user `ckpt`
#       (uid 1000, home /home/ckpt, no sudo), an /etc/hosts naming localhost and the host's name, and the host's
#       /etc/resolv.conf and local CA certificates (/usr/local/share/ca-certificates; where the root has
#       ca-certificates), so that pip and apt reach the network.
#   tools/clean_root.sh run ROOT [--root] [--copy HOST_PATH ROOT_DIR]... -- [NAME=VALUE...] COMMAND [ARG...]
#       Runs COMMAND inside ROOT as user ckpt (as root with --root) in a private mount namespace with /proc, /dev
#       (bind), /sys (read-only bind) and fresh tmpfs on /dev/shm and /tmp. The environment is wiped except PATH,
#       HOME, LANG=C.UTF-8, USER and the NAME=VALUE words before COMMAND. Each --copy copies HOST_PATH (a file or a
#       folder) into ROOT_DIR inside the root, owned by ckpt, before COMMAND starts (after the tmpfs mounts, so
#       /tmp is a valid ROOT_DIR). The mounts vanish with the namespace; the exit status is COMMAND's.
#
# Needs root on the host (mmdebstrap's root mode, mount, chroot). Memory locking inside is the host's RLIMIT_MEMLOCK
# (inherited; commonly 8 MiB), which io_uring needs only for registered buffers on this kernel line.
set -euo pipefail

readonly SUITE=bookworm
readonly MIRROR=http://deb.debian.org/debian
readonly USER_NAME=ckpt
readonly USER_ID=1000
readonly USER_HOME=/home/ckpt
readonly SAFE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() { echo "clean_root.sh: $*" >&2; exit 2; }

usage() {
  sed -n '4,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

require_root() { [[ $(id -u) == 0 ]] || die "must run as root on the host (mmdebstrap, mount and chroot need it)"; }

# A root that a previous run left mounts in (killed mid-run) must not be rm -rf'ed through its bind of /dev.
refuse_if_mounted_under() {
  local root=$1
  if findmnt -rn -o TARGET | grep -q "^$(realpath -m "$root")/"; then
    die "mounts remain under $root (see findmnt); unmount them before removing it"
  fi
}

# Writes the user's entries directly: the apt variant has no passwd package (useradd), and adding it would be
# one more package the tested system did not ask for.
add_unprivileged_user() {
  local root=$1
  echo "$USER_NAME:x:$USER_ID:$USER_ID::$USER_HOME:/bin/bash" >>"$root/etc/passwd"
  echo "$USER_NAME:x:$USER_ID:" >>"$root/etc/group"
  echo "$USER_NAME:!:19000:0:99999:7:::" >>"$root/etc/shadow"
  install -d -m 0755 -o "$USER_ID" -g "$USER_ID" "$root$USER_HOME"
}

# /etc/hosts as an installed Debian system has it (netbase's localhost lines, the installer's 127.0.1.1 line for the
# host name): the root shares the host's name, and programs resolve it (gloo, under JAX's multi-process CPU
# backend, fails without it). The apt variant has no netbase, so no /etc/hosts at all.
write_hosts_file() {
  local root=$1
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" \
    >"$root/etc/hosts"
}

# Where the network passes through a TLS-inspecting proxy, the host trusts its CA through
# /usr/local/share/ca-certificates; the root needs the same to reach PyPI. A root without ca-certificates, or a host
# without local CAs, is left as it is.
trust_host_local_certificates() {
  local root=$1
  local host_dir=/usr/local/share/ca-certificates
  compgen -G "$host_dir/*.crt" >/dev/null || return 0
  [[ -x $root/usr/sbin/update-ca-certificates ]] || return 0
  cp "$host_dir"/*.crt "$root$host_dir/"
  chroot "$root" /usr/sbin/update-ca-certificates >/dev/null 2>&1 \
    || die "update-ca-certificates failed in $root"
}

create_root() {
  [[ $# -ge 1 ]] || usage
  local root=$1; shift
  require_root
  if [[ -e $root ]]; then
    refuse_if_mounted_under "$root"
    rm -rf --one-file-system "$root"
  fi
  local include=""
  if [[ $# -gt 0 ]]; then include="--include=$(IFS=,; echo "$*")"; fi
  mmdebstrap --quiet --mode=root --variant=apt ${include:+"$include"} "$SUITE" "$root" "$MIRROR" \
    || die "mmdebstrap failed to create $root (packages: ${*:-none})"
  add_unprivileged_user "$root"
  cp --remove-destination /etc/resolv.conf "$root/etc/resolv.conf"
  write_hosts_file "$root"
  trust_host_local_certificates "$root"
}

# Parses run's options, then re-enters this script in a private mount namespace (run_inside_namespace).
run_in_root() {
  [[ $# -ge 1 ]] || usage
  local root=$1; shift
  require_root
  [[ -d $root/etc && -x $root/bin/sh ]] || die "$root is not a root made by '$0 create'"
  local as_root=0
  local -a copies=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --root) as_root=1; shift ;;
      --copy)
        [[ $# -ge 3 ]] || die "--copy needs HOST_PATH and ROOT_DIR"
        [[ -e $2 ]] || die "--copy: $2 does not exist on the host"
        [[ $3 == /* ]] || die "--copy: ROOT_DIR must be absolute inside the root, got '$3'"
        copies+=("$(realpath "$2")" "$3"); shift 3 ;;
      --) shift; break ;;
      *) die "unknown option '$1' to run (the command follows --)" ;;
    esac
  done
  [[ $# -ge 1 ]] || die "run: no command after --"
  exec unshare --mount --propagation private -- \
    "$(realpath "$0")" __inside "$(realpath "$root")" "$as_root" "${#copies[@]}" "${copies[@]}" -- "$@"
}

mount_system_dirs() {
  local root=$1
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mkdir -p "$root/dev/shm"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
  mount --bind /sys "$root/sys"
  mount -o remount,bind,ro "$root/sys"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$root/tmp"
}

# ROOT_DIR is resolved as the root sees it (chroot realpath): a link inside the root that points to /etc must lead
# to the root's /etc, not the host's, as this copy runs on the host's side of the chroot. The folders it creates
# belong to ckpt, as the copy does.
copy_into_root() {
  local root=$1 host_path=$2 root_dir=$3
  local resolved
  resolved=$(chroot "$root" /usr/bin/realpath -m "$root_dir")
  if [[ ! -e $root$resolved ]]; then
    local first_created=$resolved
    while [[ ! -e $root$(dirname "$first_created") ]]; do first_created=$(dirname "$first_created"); done
    mkdir -p "$root$resolved"
    chown -R "$USER_ID:$USER_ID" "$root$first_created"
  fi
  cp -a "$host_path" "$root$resolved/"
  chown -R "$USER_ID:$USER_ID" "$root$resolved/$(basename "$host_path")"
}

# Runs in the new mount namespace: every mount made here disappears when the namespace's last process exits.
run_inside_namespace() {
  local root=$1 as_root=$2 copy_words=$3; shift 3
  local -a copies=("${@:1:copy_words}"); shift "$copy_words"
  [[ $1 == -- ]] && shift
  mount_system_dirs "$root"
  local i
  for ((i = 0; i < ${#copies[@]}; i += 2)); do copy_into_root "$root" "${copies[i]}" "${copies[i + 1]}"; done
  local -a env_words=(PATH="$SAFE_PATH" LANG=C.UTF-8)
  local -a userspec=()
  if [[ $as_root == 1 ]]; then
    env_words+=(HOME=/root USER=root)
  else
    env_words+=(HOME="$USER_HOME" USER="$USER_NAME")
    userspec=(--userspec="$USER_ID:$USER_ID" --groups="$USER_ID")
  fi
  # env -i wipes the host's environment; the inner env applies the caller's NAME=VALUE words, after cd to HOME.
  exec chroot "${userspec[@]}" "$root" /usr/bin/env -i "${env_words[@]}" /bin/bash -c 'cd ~ && exec env "$@"' env "$@"
}

main() {
  [[ $# -ge 1 ]] || usage
  local verb=$1; shift
  case $verb in
    create) create_root "$@" ;;
    run) run_in_root "$@" ;;
    __inside) run_inside_namespace "$@" ;;
    -h|--help) usage ;;
    *) die "unknown command '$verb' (create or run)" ;;
  esac
}

main "$@"
