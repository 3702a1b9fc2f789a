"""The names the repository gives its objects, and listings that refuse any other name.

A writer of the storage may put anything there. What the repository reads as its own, or
deletes, it finds among names of the shapes it writes; a listing that meets another name
stops with ForeignObjectError naming it, rather than skip it (which would hide tampering)
or treat it as an object of its own (a prune would delete it). A check, which reports every
problem it finds, hands the listing a `foreign` that takes each such name (and each link or
special file) and lets it go on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from diskferry.backup.errors import ForeignObjectError
from diskferry.objstore.backend import ObjectInfo
from diskferry.objstore.errors import ForeignEntryError
from diskferry.objstore.store import ObjectStore

# what a listing calls with each name the repository never writes, which it then skips
OnForeign = Callable[[ForeignObjectError], None]

# a VM's, a disk's or a metadata object's name
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
_SHAPES = {
    "keys": r"keys/[0-9a-f]{32}",
    "locks": r"locks/[0-9a-f]{24}",
    "index": r"index/[0-9a-f]{32}",
    "packs": r"packs/([0-9a-f]{2})/\1[0-9a-f]{30}",
    "snapshots": rf"snapshots/{NAME}/{NAME}/{NAME}",
    "trackers": rf"trackers/{NAME}",
    "metadata": rf"metadata/{NAME}",
}


def listing(
    store: ObjectStore, folder: str, foreign: OnForeign | None = None
) -> Iterator[ObjectInfo]:
    """The objects in the repository's `folder` (`packs`, `index`, ...), or under one of its
    subfolders (`snapshots/<vm>`); ForeignObjectError at a name the repository never writes
    (ForeignEntryError at a link or a special file), or with `foreign`, each handed to it and
    skipped."""
    shape = re.compile(_SHAPES[folder.split("/", 1)[0]])

    def entry(error: ForeignEntryError) -> None:
        if foreign is not None:
            foreign(ForeignObjectError(error.message, objects=(error.path,)))

    for info in store.list(folder + "/", None if foreign is None else entry):
        if shape.fullmatch(info.path):
            yield info
            continue
        error = ForeignObjectError(
            f"{store.url}: {info.path} is not an object this repository writes: someone "
            "with write access to its storage put it there; move it away, then run "
            "'diskferry repo check'",
            objects=(info.path,),
        )
        if foreign is None:
            raise error
        foreign(error)
