"""The filesystem catalog: entries, kinds, modes, path rules and the Repository API the
CLI, the mount and the Spark jobs share, built on the version layer and the data plane."""
