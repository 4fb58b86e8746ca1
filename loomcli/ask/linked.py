"""Notes a sent note links to: `ask` may send them when the ranked files leave room.

Kept apart from the assembly (assemble.py) so either can change alone: this only
extends the ranked list, and the assembly's own rules (top_k, the window, near-copies)
decide whether a linked note is sent.
"""

from __future__ import annotations

from loomcli.store.rows import Hit

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.store.seam import IndexStore as Store

LINKED_PER_NOTE = 3  # links followed from one ranked note, in the note's order
RESOLVED_AT_ONCE = 8


def with_linked(store: Store, hits: list[Hit], top_k: int) -> list[Hit]:
    """`hits`, then the notes that the first `top_k` of them link to (`[[wikilinks]]`,
    resolved) and that are not ranked already: they come last, so they are sent only
    when fewer than top_k ranked files are (few matched, or some were left out)."""
    ranked = {h.file_id for h in hits}
    extra: list[int] = []
    for hit in hits[:top_k]:
        targets = [t for t, _heading, _alias, _line in store.links_of(hit.file_id)]
        followed = 0
        # Resolved a few at a time: a note of 1,000 links costs what its first ones do.
        for at in range(0, len(targets), RESOLVED_AT_ONCE):
            for fid in store.resolve_links(targets[at:at + RESOLVED_AT_ONCE], hit.file_id):
                if fid is None or fid in ranked or fid in extra:
                    continue
                extra.append(fid)
                followed += 1
                if followed == LINKED_PER_NOTE:
                    break
            if followed == LINKED_PER_NOTE:
                break
    info = store.hits_for(extra)
    return hits + [Hit(info[f][0], info[f][1], 0.0, "", f, info[f][2])
                   for f in extra if f in info]
