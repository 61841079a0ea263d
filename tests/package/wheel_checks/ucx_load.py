"""One rank of numpy_load.py's resharded restore with the ucx-cu12 extra installed and CKPT_TRANSPORT=ucx: the restore
as there, then the proof that its exchange ran over UCX loaded from NVIDIA's libucx wheel (the clean root has no
other UCX).   Usage: ucx_load.py DIR"""

import os
import runpy

os.environ["CKPT_LOAD_READS"] = "once"  # the exchange, which ranks on one node with local storage might skip
restore = runpy.run_path("numpy_load.py", run_name="__main__")
stats = restore["context"].stats()
ucp = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libucp.so" in line})
assert stats["transport"] == "ucx", f"the restore's transport is {stats['transport']}, not ucx"
assert stats["bytes_received"] > 0, "no byte came over the exchange"
assert len(ucp) == 1 and "/site-packages/libucx/" in ucp[0], f"libucp loaded from {ucp}, not the libucx wheel"
print(f"rank {restore['context'].rank}: {stats['bytes_received']} B received over UCX from {ucp[0]}")
