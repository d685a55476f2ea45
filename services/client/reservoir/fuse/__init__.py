"""`reservoir fuse`: the namespace as a read-only POSIX file system.

- `filesystem.ReservoirFS`: the FUSE operations, over one `reservoir.client.Client`;
- `read_ahead.ReadAhead`: sequential readers get their next chunks fetched ahead;
- `server`: the serving process (`python -m reservoir.fuse.server`), which mounts;
- `supervisor.Supervisor`: owns the mount point, restarts a serving process that dies
  and clears its dead mount (self-healing);
- `command`: the `reservoir fuse` subcommand (foreground, `-d`, `--unmount`);
- `mountpoint`, `run_record`, `mount_spec`, `errnos`, `libfuse`: what those share.

mfusepy (the `fuse` extra) and libfuse 3 are needed by the serving process only.
"""
