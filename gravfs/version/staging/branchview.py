"""What one branch looks like in this workspace: staging layers over a metarange."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from gravfs.version.staging import view
from gravfs.version.staging.area import BranchState, StagingArea


@dataclass
class BranchLayers:
    """Layers of a branch for one read transaction (newest first)."""

    layers: list
    state: Optional[BranchState]  # None for an immutable ref
    metarange: str

    def get(self, key: bytes, area: StagingArea, txn, committed) -> Optional[view.Item]:
        if self.state is not None:
            raw = area.lookup(txn, self.state.tokens(), key)
            if raw is not None:
                ident, data = view.decode_staged(raw)
                return None if ident is None else (key, ident, data)
        rec = committed.get(self.metarange, key)
        return None if rec is None else (rec[0], rec[1], rec[2])

    def iter(self, start: bytes = b"") -> Iterator[view.Item]:
        return view.live(self.layers, start)

    def list_dir(self, prefix: bytes, start_after: Optional[bytes] = None):
        return view.list_dir(self.layers, prefix, start_after)

    def first_under(self, prefix: bytes) -> Optional[view.Item]:
        return view.first_live_under(self.layers, prefix)


def branch_layers(area: StagingArea, txn, committed, branch: str, metarange: str,
                  state: Optional[BranchState] = None) -> BranchLayers:
    st = state or area.state(txn, branch)
    layers: list = [view.TokenLayer(area, txn, t) for t in st.tokens()]
    layers.append(view.CommittedLayer(committed, metarange))
    return BranchLayers(layers, st, metarange)


def committed_layers(committed, metarange: str) -> BranchLayers:
    return BranchLayers([view.CommittedLayer(committed, metarange)], None, metarange)
