"""The exceptions of idgen_client. Every one carries the server's SQLSTATE and DETAIL where there is
one (``sqlstate``, ``detail``), and says whether it is final for the node (``final``): a final error
means the node issues no more IDs; stop serving what needs them and exit (or start a new node).

The extension module raises them, setting ``message``, ``sqlstate`` and ``detail`` on the instance;
the classes define no ``__init__`` of their own, so that raising one runs no Python code inside
the extension's frames (at interpreter exit, CPython may end a thread whenever Python code runs)."""

from __future__ import annotations

from typing import Optional


class IdgenError(Exception):
    """Base class. ``str(e)`` is the whole reason, the server's message and DETAIL included."""

    final = False
    # The whole reason (as str(e)), the server's SQLSTATE, and its DETAIL, where there is one.
    message: str = ""
    sqlstate: Optional[str] = None
    detail: Optional[str] = None


class StartError(IdgenError):
    """The claim failed and was not worth retrying (or kept failing until ``start_timeout``): for
    example ``42501`` (the role may not claim for the service), ``55006`` (a pinned machine id is
    held), ``22023`` (outside the pool). Nothing was claimed, or the claim was released."""

    final = True


class NotInstalled(StartError):
    """The extension idgen is not installed in the database the DSN names."""


class LayoutError(StartError):
    """Claimed, but the service's layout could not be read (the role does not see its row of
    ``idgen_layouts``): the claim was released and no ID issued. The node never guesses a layout."""


class NotBeforeAhead(StartError):
    """The claim's ``not_before`` was still ahead of the node's clock at ``start_timeout``: the id
    was released, no ID issued (check the node's clock)."""


class NoAnswer(IdgenError):
    """A claim or the release got no answer within ``call_timeout`` (it was cancelled), or its
    commit was not confirmed by the synchronous standby."""

    final = True


class LeaseExpired(IdgenError):
    """No heartbeat succeeded before the lease's deadline. Not final: IDs come again once a
    heartbeat succeeds and the node still owns its id."""


class ClockAhead(IdgenError):
    """The clock jumped past what the registry holds for this node. Not final: the node reports
    its clock at once and issues again when that report is answered."""


class ClockBehind(IdgenError):
    """The clock stepped back further behind the last ID than ``max_clock_backward``. Not final:
    IDs come again when the clock is past the last ID (IDs never reuse time)."""


class ClockOutsideLayout(IdgenError):
    """The clock reads a time the service's layout cannot stamp. Not final by itself: the node's
    next heartbeat reports that clock, and the server refuses it (``OwnershipLost``, ``22023``)
    unless the clock came back first."""


class OwnershipLost(IdgenError):
    """A heartbeat was refused: the id moved to another node or was released by hand (``55000``;
    ``detail`` names the new holder), the watermark was refused (``22023``), or the role may no
    longer act for the service (``42501``). Final."""

    final = True


class NodeStopped(IdgenError):
    """The node was shut down (``shutdown``, the end of a ``with`` block, or a signal)."""

    final = True


class NodeForked(NodeStopped):
    """This process is a fork of the one that started the node (``os.fork``, gunicorn's
    ``--preload``, multiprocessing's fork start method). A node does not cross ``fork()``: the child
    would repeat the parent's IDs, so it neither mints nor releases there. Start a node in each
    process after the fork."""


class HeartbeatDied(IdgenError):
    """The heartbeat thread died; the node stopped issuing."""

    final = True


class ReleaseError(IdgenError):
    """The release at shutdown failed; the id comes back by the take-back tiers."""

    final = True


__all__ = [
    "IdgenError",
    "StartError",
    "NotInstalled",
    "LayoutError",
    "NotBeforeAhead",
    "NoAnswer",
    "LeaseExpired",
    "ClockAhead",
    "ClockBehind",
    "ClockOutsideLayout",
    "OwnershipLost",
    "NodeStopped",
    "NodeForked",
    "HeartbeatDied",
    "ReleaseError",
]
