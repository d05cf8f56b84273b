"""The version layer: refs, commits, history, committed trees, staging and the commit
protocol. It stores opaque values under byte keys and knows nothing of files."""
