"""What the master, workers and clients share."""

# The distribution that ships the `reservoir` import package (`reservoir` on PyPI is an
# unrelated project): what pip installs and importlib.metadata knows us by.
DISTRIBUTION = "reservoir-cache"
