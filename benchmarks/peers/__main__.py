"""``python -m benchmarks.peers NAME --only W1,W2 [--quick]``: one peer's figures as JSON.

The peer's module is imported here rather than run as ``__main__``, so that its
worker subprocesses (which import it by name) and this process share one module.
"""

from __future__ import annotations

import importlib
import sys

from benchmarks.peers import PEERS
from benchmarks.peers.base import main

if __name__ == "__main__":
    peers = {peer.name: peer for peer in PEERS}
    if len(sys.argv) < 2 or sys.argv[1] not in peers:
        sys.exit(
            f"usage: python -m benchmarks.peers {{{','.join(peers)}}} [--only W1,..] [--quick]"
        )
    peer = peers[sys.argv.pop(1)]
    module = importlib.import_module(peer.module)
    main(peer.name, module.STEPS, getattr(module, "setup", None))
