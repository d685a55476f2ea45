"""The `reservoir` command line (main.py puts it together)."""

import os

# gRPC's core logs to stderr on its own (a failed TLS handshake, at INFO): raw text
# that is no line of this CLI's. Set here, before anything starts gRPC; a user who wants
# those lines sets GRPC_VERBOSITY.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
