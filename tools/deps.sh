#!/usr/bin/env bash
# Installs the Debian packages ckpt needs to build and test, and only those that are missing: with everything
# present it changes nothing and needs no privileges. Runs apt-get as root, or through sudo when available.
set -euo pipefail

# clang with its sanitizer and libFuzzer runtimes (and llvm-symbolizer for their reports) builds the sanitizer stages.
packages=(
  build-essential cmake ninja-build pkg-config
  liburing-dev libucx-dev ucx-utils capnproto libcapnp-dev libxxhash-dev libisal-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev fio openmpi-bin libopenmpi-dev
  nlohmann-json3-dev  # header-only JSON for the safetensors headers and Hugging Face index files
  libcli11-dev  # header-only command-line parsing for the ckpt tool
  python3 python3-venv
  abigail-tools  # abidiff: the ABI of libckpt against the previous release's (tests/abi.cmake)
  clang libclang-rt-14-dev llvm
  libcurl4-openssl-dev  # HTTP and SigV4 signing for the S3 storage backend
  libzstd-dev  # lossless compression of stored blocks (CKPT_SAVE_COMPRESS)
  libexpat1-dev  # the S3 backend parses the XML answers of S3 (listings, errors, multipart uploads)
  ceph-mon ceph-osd radosgw  # a real S3 server for the S3 tests: a one-host Ceph cluster (tools/s3_server.sh)
  curl  # tools/s3_server.sh and tests/s3/ talk to that server with curl's --aws-sigv4
  iproute2  # ss: tools/s3_server.sh picks free ports; ip netns: the server on a host of its own
  rclone  # a second, independent S3 client for the S3 tests
  mmdebstrap  # the clean root file systems that the packages are tested in (tools/clean_root.sh)
  unzip  # a look inside the wheel (tools/package.sh)
  dpkg-dev fakeroot file  # the Debian package: dpkg-shlibdeps computes its run-time dependencies (tools/package_c.sh)
)

# Toolchains for the Rust and Go bindings' tests, from Debian unless a newer one is already on the PATH.
command -v cargo >/dev/null 2>&1 || packages+=(cargo)
command -v go >/dev/null 2>&1 || packages+=(golang-go)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: not a Debian system (no dpkg-query); install these yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "deps.sh: all ${#packages[@]} packages are installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "deps.sh: missing packages and neither root nor sudo to install them: ${missing[*]}" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
