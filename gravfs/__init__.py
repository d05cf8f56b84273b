"""gravfs: a Git-like versioned filesystem for data lakes (Graveler design)."""

__version__ = "0.1.0"
