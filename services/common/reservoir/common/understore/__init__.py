"""Under-stores: where the data really lives (S3, a directory), opened by URI."""
