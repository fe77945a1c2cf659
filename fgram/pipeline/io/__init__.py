"""The I/O layer, on pyarrow's filesystems (local disks and object stores alike): paths
and URIs (`storage`), failures worth a retry or a clear line (`failures`), local copies
(`cache`), the one-writer lock (`locks`), atomic publishing (`publish`), a run's work
folder (`workdir`) and what killed runs left (`clean`)."""
