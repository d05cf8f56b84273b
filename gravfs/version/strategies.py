"""What becomes of a path both sides changed: the names the CLI offers and the committer
takes (a module of its own so that the CLI need not load the committer to parse)."""

# merge: the source's change, the destination's, or fail (nothing written)
MERGE_STRATEGIES = ("fail", "source-wins", "dest-wins")
# commit: a path the staging and the branch head (another workspace's commit) both
# changed since the staging's base: fail (nothing lost), ours replace the head's, or ours
# are left out (and dropped with the rest of the committed staging)
COMMIT_STRATEGIES = ("fail", "staged-wins", "head-wins")
