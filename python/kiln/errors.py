"""Kiln's errors as Python exceptions (docs/python.md "Errors").

Every failure of the C++ library arrives as a Status; the binding raises the class for its code. Each carries
``code`` (the status code's name, e.g. ``"InvalidArgument"``), ``exit_code`` (what the ``kiln`` CLI would exit
with for it) and ``message`` (Kiln's words, naming the file, node, tensor or attribute at fault).
"""
from __future__ import annotations


class KilnError(RuntimeError):
    """Any error Kiln reports."""

    default_code = "Internal"
    default_exit_code = 10

    def __init__(self, message: str, code: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else type(self).default_code
        self.exit_code = exit_code if exit_code is not None else type(self).default_exit_code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class BadInput(KilnError, ValueError):
    """A spec, argument, tensor or file contents that is wrong (InvalidArgument; exit 2)."""

    default_code = "InvalidArgument"
    default_exit_code = 2


class NotFound(BadInput, LookupError):
    """A file, record or tensor that is not there (NotFound; exit 2)."""

    default_code = "NotFound"
    default_exit_code = 2


class Corruption(KilnError):
    """A record or file whose checksum or structure is wrong (exit 4)."""

    default_code = "Corruption"
    default_exit_code = 4


class NotSupported(KilnError):
    """cuDNN or the device cannot run this graph or configuration (exit 5)."""

    default_code = "NotSupported"
    default_exit_code = 5


class Unavailable(KilnError):
    """The environment cannot: no GPU, a driver too old, a library or server missing (exit 3)."""

    default_code = "Unavailable"
    default_exit_code = 3


class NoPlan(KilnError):
    """The state does not allow the call: a stale plan the policy refuses, a refusal (FailedPrecondition; exit 6)."""

    default_code = "FailedPrecondition"
    default_exit_code = 6


class CheckFailed(KilnError):
    """A numerical or consistency check failed (exit 1)."""

    default_code = "CheckFailed"
    default_exit_code = 1


class Cancelled(KilnError):
    """Interrupted (exit 130)."""

    default_code = "Cancelled"
    default_exit_code = 130


class NewerVersion(KilnError):
    """Made by a newer Kiln (a store schema, a bundle): upgrade Kiln (exit 7)."""

    default_code = "NewerVersion"
    default_exit_code = 7


class InternalError(KilnError):
    """A bug, or an unexpected library failure (exit 10)."""


BY_CODE = {
    "InvalidArgument": BadInput,
    "NotFound": NotFound,
    "Corruption": Corruption,
    "NotSupported": NotSupported,
    "Unavailable": Unavailable,
    "FailedPrecondition": NoPlan,
    "CheckFailed": CheckFailed,
    "Cancelled": Cancelled,
    "NewerVersion": NewerVersion,
    "Internal": InternalError,
}

__all__ = ["KilnError"] + sorted({c.__name__ for c in BY_CODE.values()})
