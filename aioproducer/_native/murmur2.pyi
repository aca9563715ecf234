"""Java-compatible murmur2 key hash (compiled: murmur2.pyx)."""

from typing_extensions import Buffer

def murmur2(data: Buffer) -> int:
    """Java's ``Utils.murmur2``: signed 32-bit hash, seed 0x9747b28c."""

def murmur2_partition(key: Buffer, num_partitions: int) -> int:
    """``(murmur2(key) & 0x7fffffff) % num_partitions``; ValueError if not positive."""
