"""The one decision of full or incremental, from the tracker's chain and the disk's checkpoints."""

import pytest

from diskferry.backup.plan import INCONSISTENT, DiskPlan, decide
from diskferry.backup.trackers import Checkpoint, DiskChain
from diskferry.qemu.bitmaps import Checkpoint as DiskCheckpoint

C1, C2 = "diskferry-repo1-1", "diskferry-repo1-2"


def chain(*names, since_full=0):
    return DiskChain(
        checkpoints=[Checkpoint(name=n, snapshot=f"snap-{n[-1]}") for n in names],
        incrementals_since_full=since_full,
    )


def on_disk(*names, inconsistent=()):
    return [DiskCheckpoint(n, 65536, n == names[-1], inconsistent=n in inconsistent) for n in names]


def plan(chain=None, parent_exists=True, source="cbt"):
    return DiskPlan("d", "/v/disk.raw", source, chain, parent_exists)


@pytest.mark.parametrize(
    ("disk", "found", "options", "reason"),
    [
        (plan(None), on_disk(C1), {}, "no earlier backup of this disk"),
        (plan(chain()), on_disk(C1), {}, "no checkpoint to start from: the chain was reset"),
        (plan(chain(C1)), on_disk(C1), {"full": True}, "a full backup was asked for (--full)"),
        (
            plan(chain(C1, since_full=3)),
            on_disk(C1),
            {"max_incrementals": 3},
            "3 incrementals since the last full reached the limit of 3",
        ),
        (
            plan(chain(C1), parent_exists=False),
            on_disk(C1),
            {},
            f"broken chain: snapshot snap-1 of checkpoint {C1} is missing from the repository",
        ),
        (plan(chain(C1)), [], {}, f"checkpoint {C1} missing on the disk"),
        (plan(chain(C2)), on_disk(C1), {}, f"checkpoint {C2} missing on the disk"),
        (plan(chain(C1)), on_disk(C1, inconsistent=(C1,)), {}, INCONSISTENT),
        (plan(chain(C1)), on_disk(C1, C2, inconsistent=(C2,)), {}, INCONSISTENT),
        (plan(chain(C1), source="raw"), [], {}, "CBT is off on /v/disk.raw"),
        (plan(None, source="nbd"), [], {}, "/v/disk.raw is an NBD export without a checkpoint"),
    ],
)
def test_full_and_why(disk, found, options, reason):
    options = {"full": False, "max_incrementals": 0, **options}
    decision = decide(disk, found, **options)
    assert decision.mode == "full"
    assert decision.reason.startswith(reason)
    assert (decision.since, decision.parent) == (None, None)


def test_incremental_since_the_chain_s_last_checkpoint():
    decision = decide(
        plan(chain(C1, C2, since_full=2)),
        on_disk(C1, C2, inconsistent=(C1,)),  # an older broken one does not count
        full=False,
        max_incrementals=3,
    )
    assert (decision.mode, decision.reason) == ("incremental", f"changes since checkpoint {C2}")
    assert (decision.since, decision.parent) == (C2, "snap-2")
