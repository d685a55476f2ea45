"""What every server process runs: its gRPC server, auth, metrics endpoints."""
