"""Branches, tags and commit objects on the object store."""
