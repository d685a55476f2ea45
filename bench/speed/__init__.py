"""The parts of `bench/read_bench.py`: data sets, S3 servers, readers, the target table."""
