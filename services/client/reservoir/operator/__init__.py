"""`reservoir operator`: a Kubernetes operator (Kopf) that forwards `Dataset` resources
(reservoir.io/v1alpha1) to the cluster through the SDK's dataset API and writes their
status back. Needs the `operator` extra (`pip install 'reservoir-cache[operator]'`).

The handlers (dataset_handlers.py) are plain functions of a resource body and a `Client`;
kopf_wiring.py registers them with Kopf; command.py is the CLI subcommand."""
