"""Staging: uncommitted changes of every branch of a workspace in a local LMDB database
(area.py), read as layers over the committed tree (view.py, branchview.py), checked
and salvaged without LMDB when damaged (lmdbcheck.py, lmdbread.py, salvage.py)."""
