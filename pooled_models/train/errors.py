"""The error a user can fix: train.py and sweep.py print it as one line, without a traceback, and exit 2."""

__all__ = ["UsageError"]


class UsageError(ValueError):
    """A problem with the arguments, the data or the output folder that the user can fix."""
