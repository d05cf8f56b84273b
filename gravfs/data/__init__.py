"""The data plane: file contents as content-addressed objects, and reading them.

objects (DataObjects: store, pending uploads, verified acquires), handles (the
protocol every acquired object's handle follows), sparse (files with holes),
chunksums (per-chunk CRC32C sums of verified objects), reader (the ranged,
cached, read-ahead reader; in place from a local store: inplace). Used by the
catalog, the mount, the CLI and later Spark executors; nothing here knows FUSE.
"""
