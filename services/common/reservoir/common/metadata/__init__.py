"""The metadata store (etcd or memory) and the tables the cluster keeps in it."""
