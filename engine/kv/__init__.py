from .block_allocator import BlockAllocator, OutOfBlocks
from .cache_manager import KVCacheManager
from .pool import KVPool, kv_bytes_per_token

__all__ = ["BlockAllocator", "OutOfBlocks", "KVCacheManager", "KVPool", "kv_bytes_per_token"]
