"""Memory made warm before bench/peers' warm restores, the same way in every peer's processes.

Restores that allocate their outputs (Orbax's, and ckpt's first in a process: later ones reuse the pages of the
arrays the process dropped) commit fresh memory; DCP loads into tensors whose memory torch's allocator usually hands
back from its save. On a virtual machine that returns freed memory to its hypervisor, the difference decides the
restore times (on the build machines a process's first 256 MiB of fresh memory took about 1 s to commit, the next
256 MiB right after freeing the first under 0.15 s), so every restore is also measured a second time right after its
process touched and freed as much memory as the restore places in it.
"""

import ctypes
import mmap

_MADV_POPULATE_WRITE = 23  # Linux 5.14


def touch_and_free(size):
    """Commits `size` bytes of fresh anonymous memory, then unmaps them: the next allocations of the process (and of
    the machine) find recently used pages."""
    if size <= 0:
        return
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    if ctypes.CDLL(None).madvise(ctypes.c_void_p(address), ctypes.c_size_t(size), _MADV_POPULATE_WRITE) != 0:
        page = b"\1" * mmap.PAGESIZE
        for offset in range(0, size - size % mmap.PAGESIZE, mmap.PAGESIZE):
            memory[offset:offset + mmap.PAGESIZE] = page
    memory.close()
