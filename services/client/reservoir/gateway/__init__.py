"""`reservoir gateway`: the S3 REST API in front of the cache, so that any S3 client
(boto3, s3fs, the AWS CLI, ...) reads through Reservoir. A bucket is a top-level
directory of the namespace, a key the rest of the path."""
