# shellcheck shell=bash
# bench/ramdisk.sh: sourced by bench/run for --ramdisk. Makes the steady, fast disk of PLATFORM.md out of memory
# and takes it down again: a tmpfs holding one image file written full of zeros (so that its pages exist before the
# benchmark writes: a sparse image writes 10x slower on its first pass), a loop device over the image, ext4 on the
# loop device, mounted. Everything lives under one mktemp directory, so that runs side by side never share a mount
# point. Needs die and progress from bench/run.

ramdisk_base=""  # the mktemp directory holding both mount points; empty until ramdisk_create starts
ramdisk_dir=""   # the mounted ext4 file system, once ramdisk_create returns
ramdisk_image_mib=0

# ext4 over the loop device needs room beyond the files: its journal (64 MiB at these sizes), inode tables and
# group descriptors (about 2% of the size), and the manifests and directories of the checkpoints.
ramdisk_margin_percent=5
ramdisk_margin_mib=256
# The tmpfs holds the image and nothing else; a little room keeps dd from failing on tmpfs's own rounding.
ramdisk_tmpfs_slack_mib=16

# The image size for a run whose directory holds at most FOOTPRINT_MIB of files at once.
ramdisk_size_for() {
  ramdisk_image_mib=$(($1 + $1 * ramdisk_margin_percent / 100 + ramdisk_margin_mib))
}

# Refuses, with the reason, where --ramdisk cannot work: not root, a tool or the loop driver missing, or too little
# memory for the image beside the RUN_MIB that the benchmark's own processes need.
ramdisk_check() {
  local run_mib=$1 tool avail_mib
  [ "$(id -u)" = 0 ] || die "--ramdisk needs root (it mounts a tmpfs, attaches a loop device and mounts ext4);" \
    "without root, pass --dir to measure on a directory of your own"
  for tool in mount umount mountpoint losetup mkfs.ext4 dd; do
    command -v "$tool" >/dev/null 2>&1 || die "--ramdisk needs $tool (Debian: apt-get install mount e2fsprogs)"
  done
  [ -e /dev/loop-control ] || modprobe loop 2>/dev/null || [ -e /dev/loop-control ] ||
    die "--ramdisk needs loop devices: /dev/loop-control is missing (modprobe loop)"
  avail_mib=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
  local need_mib=$((ramdisk_image_mib + ramdisk_tmpfs_slack_mib + run_mib))
  [ "$avail_mib" -ge "$need_mib" ] ||
    die "--ramdisk: $avail_mib MiB of memory available, the run needs about $need_mib MiB" \
      "($ramdisk_image_mib MiB of RAM disk, $run_mib MiB for the benchmark's processes); try --quick or smaller sizes"
}

# Makes the RAM disk of ramdisk_image_mib and sets ramdisk_dir. Whatever it made before a failure is left for
# ramdisk_remove, which the caller's EXIT trap runs.
ramdisk_create() {
  ramdisk_base=$(mktemp -d /tmp/ckpt-ramdisk.XXXXXX)
  local tmpfs=$ramdisk_base/tmpfs image=$ramdisk_base/tmpfs/disk.img loop
  mkdir "$tmpfs" "$ramdisk_base/ext4"
  progress "RAM disk: tmpfs of $((ramdisk_image_mib + ramdisk_tmpfs_slack_mib)) MiB at $tmpfs"
  mount -t tmpfs -o "size=$((ramdisk_image_mib + ramdisk_tmpfs_slack_mib))m,mode=0700" ckpt-ramdisk "$tmpfs" ||
    die "mounting a tmpfs at $tmpfs failed"
  progress "RAM disk: writing the $ramdisk_image_mib MiB image full, so its pages exist"
  dd if=/dev/zero of="$image" bs=1M count="$ramdisk_image_mib" status=none || die "filling $image failed"
  loop=$(losetup -f --show "$image") || die "attaching a loop device to $image failed"
  # The inode tables and the journal are written now rather than by ext4lazyinit in the background, which would
  # write to the disk while the benchmark measures it.
  mkfs.ext4 -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0 "$loop" || die "mkfs.ext4 on $loop failed"
  mount -t ext4 "$loop" "$ramdisk_base/ext4" || die "mounting $loop at $ramdisk_base/ext4 failed"
  ramdisk_dir=$ramdisk_base/ext4
  progress "RAM disk: ext4 on $loop mounted at $ramdisk_dir"
  ramdisk_warm
}

# Writes one file over the whole free space of the new file system with direct I/O, then deletes it: on a fresh
# RAM disk the first writes to each block run 3-4x slower than later ones even though the image was written full
# (fio writing 1 GiB into a new file of a fresh 1.5 GiB disk: 1.19 s, 1.04 s, then 0.33 s and 0.26 s; after one
# such pass 0.27-0.32 s from the start), so without it the first run measured a colder disk than the others.
ramdisk_warm() {
  local free_mib file=$ramdisk_dir/warm.dat
  free_mib=$(df -Pm "$ramdisk_dir" | awk 'NR == 2 { print $4 }')
  progress "RAM disk: one direct write over its $free_mib MiB of free space, so that no run meets cold blocks"
  # 64 MiB short of the end, so that the file's own extent blocks fit.
  dd if=/dev/zero of="$file" bs=4M count=$(((free_mib - 64) / 4)) oflag=direct status=none ||
    die "writing $file over the RAM disk's free space failed"
  rm -f "$file"
  sync
}

# Unmounts DIR if it is mounted, waiting a few seconds for processes that still hold files there to go (children
# of an interrupted phase still exiting), then detaching it lazily. Says so and returns 1 if it had to.
ramdisk_unmount() {
  local dir=$1 tries
  for ((tries = 0; tries < 20; tries++)); do
    mountpoint -q "$dir" || return 0
    umount "$dir" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "bench/run: $dir still busy after 10 s: detached lazily (umount -l); it goes once its users exit" >&2
  umount -l "$dir" 2>/dev/null
  return 1
}

# Takes down whatever ramdisk_create made, in reverse order; runs from an EXIT trap, so it never stops half way.
# The loop devices are found from the image rather than remembered, so that one attached by a losetup that was
# interrupted before it printed its name goes too. Safe to call twice.
ramdisk_remove() {
  [ -n "$ramdisk_base" ] && [ -d "$ramdisk_base" ] || return 0
  local tmpfs=$ramdisk_base/tmpfs image=$ramdisk_base/tmpfs/disk.img loop clean=1
  ramdisk_unmount "$ramdisk_base/ext4" || clean=0
  if [ -e "$image" ]; then
    for loop in $(losetup -n -O NAME -j "$image" 2>/dev/null); do
      losetup -d "$loop" 2>/dev/null || { clean=0; echo "bench/run: detaching $loop failed" >&2; }
    done
  fi
  ramdisk_unmount "$tmpfs" || clean=0
  # A mount point still in use fails rmdir (EBUSY) and stays; a lazily detached one is a plain directory again.
  rmdir "$ramdisk_base/ext4" "$tmpfs" "$ramdisk_base" 2>/dev/null || clean=0
  [ "$clean" = 0 ] || progress "RAM disk removed"
  ramdisk_base=""
}
