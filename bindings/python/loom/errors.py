"""loom's errors. Every failed call raises a subclass of loom.Error whose text is loom's
message (loomGetLastError: the rank, peer, collective and step where loom knows them) and whose
`result` is the loomResult_t code."""
import builtins


class Error(Exception):
    """A loom call failed."""
    result = None


class InvalidArgumentError(Error, ValueError):
    """loomInvalidArgument: a bad value (a buffer of the wrong size, a bad dtype or root)."""
    result = 1


class InvalidUsageError(Error):
    """loomInvalidUsage: a call made in the wrong state (a destroyed communicator)."""
    result = 2


class SystemCallError(Error, OSError):
    """loomSystemError: the OS refused (a socket, shared memory)."""
    result = 3


class InternalError(Error):
    """loomInternalError: a bug in loom."""
    result = 4


class RemoteError(Error):
    """loomRemoteError: a peer failed, died or aborted."""
    result = 5


class TimeoutError(Error, builtins.TimeoutError):
    """loomTimeout: a wait passed its deadline (the communicator's timeout)."""
    result = 6


class InProgressError(Error):
    """loomInProgress: a non-blocking operation has not finished yet."""
    result = 7


BY_RESULT = {cls.result: cls for cls in (InvalidArgumentError, InvalidUsageError,
                                         SystemCallError, InternalError, RemoteError,
                                         TimeoutError, InProgressError)}
