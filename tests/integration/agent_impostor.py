#!/usr/bin/env python3
"""Poses as a job's ckpt-agent, as another user (uid 65534) would, for tests/integration/memory_tier.sh.

Usage: agent_impostor.py directory|listens SOCKET_DIR JOB NODE RECORD

It computes the name of the agent's socket of JOB on NODE, as anyone can, and listens there: 'directory' makes
SOCKET_DIR first as that user (its parent must be open to everyone, as /tmp is); 'listens' binds in SOCKET_DIR as
it is run (root) and then becomes that user before it listens, as if it had found a way into the user's directory.
After it listens and after each connection ends, it writes "connections N bytes M" to RECORD: what ranks sent it.
"""
import hashlib
import os
import socket
import struct
import sys

NOBODY = 65534


def socket_name(job, node):
    # collectives/agent/agent_protocol.cc: 16 hex digits of SHA-256 over the job id and the node, each length-prefixed.
    parts = b"".join(struct.pack("<Q", len(part)) + part for part in (job.encode(), node.encode()))
    return "agent-" + hashlib.sha256(parts).hexdigest()[:16] + ".sock"


def become_nobody():
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def main():
    mode, socket_dir, job, node, record = sys.argv[1:6]
    if mode == "directory":
        become_nobody()
        os.mkdir(socket_dir, 0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(os.path.join(socket_dir, socket_name(job, node)))
    if mode == "listens":
        become_nobody()
    listener.listen(8)
    connections = received = 0

    def write_record():
        with open(record, "w") as out:
            out.write(f"connections {connections} bytes {received}\n")

    write_record()
    while True:
        connection, _ = listener.accept()
        connections += 1
        while True:
            data = connection.recv(1 << 20)
            if not data:
                break
            received += len(data)
        connection.close()
        write_record()


if __name__ == "__main__":
    main()
