"""The worker's wire names: its gRPC service and the full path of each method.

One spelling for every side that names them (the worker's handler table, the master's
and clients' calls, the token rules, the data port's span, the tests), so a method is
renamed or added in one place."""

from __future__ import annotations

SERVICE = "reservoir.v1.WorkerService"

READ_BLOCK_NAME = "ReadBlock"
READ_SMALL_NAME = "ReadSmall"
READ_BLOCKS_NAME = "ReadBlocks"
LOAD_BLOCKS_NAME = "LoadBlocks"
FREE_BLOCKS_NAME = "FreeBlocks"
GET_STATS_NAME = "GetStats"
COMMIT_BLOCKS_NAME = "CommitBlocks"
WRITE_PART_NAME = "WritePart"
COPY_BLOCKS_NAME = "CopyBlocks"
PULL_BLOCKS_NAME = "PullBlocks"


def method_path(name: str) -> str:
    """The path a gRPC call names: `/package.Service/Method`."""
    return f"/{SERVICE}/{name}"


READ_BLOCK = method_path(READ_BLOCK_NAME)
READ_SMALL = method_path(READ_SMALL_NAME)
READ_BLOCKS = method_path(READ_BLOCKS_NAME)
LOAD_BLOCKS = method_path(LOAD_BLOCKS_NAME)
FREE_BLOCKS = method_path(FREE_BLOCKS_NAME)
GET_STATS = method_path(GET_STATS_NAME)
COMMIT_BLOCKS = method_path(COMMIT_BLOCKS_NAME)
WRITE_PART = method_path(WRITE_PART_NAME)
COPY_BLOCKS = method_path(COPY_BLOCKS_NAME)
PULL_BLOCKS = method_path(PULL_BLOCKS_NAME)

# The methods that hand out block bytes (a span or a rule about reads names these).
READS = (READ_BLOCK, READ_SMALL, READ_BLOCKS)
