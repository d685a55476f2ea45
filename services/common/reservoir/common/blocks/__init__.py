"""A block's bytes: on disk, on a worker's data port, staged by a writer."""
