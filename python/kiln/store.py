"""The plan store from Python (docs/python.md "The store"): what `kiln plans ls/verify/export/import/rm` do.

    with kiln.store.open("plans.db", read_only=True) as s:
        for r in s.ls(): print(r["structure"], r["shape_key"], r["config"], r["median_ms"])
"""
from __future__ import annotations

import os

from . import _kiln


class Store:
    """An open plan store: a SQLite file or a postgresql:// location. Close it (or use `with`)."""

    def __init__(self, impl: "_kiln.Store"):
        self._s = impl

    @property
    def location(self) -> str:
        return self._s.location

    @property
    def read_only(self) -> bool:
        return self._s.read_only

    def ls(self, structure: str = "", shape: str = "", fingerprint: str = "", tuned_only: bool = False) -> list[dict]:
        """Records matching a structure prefix, a shape key and a fingerprint key (each "" for any)."""
        return self._s.ls(structure, shape, fingerprint, tuned_only)

    def remove(self, structure: str = "", shape: str = "", fingerprint: str = "", all: bool = False) -> int:
        return self._s.remove(structure, shape, fingerprint, all)

    def verify(self) -> dict:
        return self._s.verify()

    def export_bundle(self, path: str | os.PathLike[str], structure: str = "", overwrite: bool = False) -> dict:
        return self._s.export_bundle(os.fspath(path), structure, overwrite)

    def import_bundle(self, path: str | os.PathLike[str]) -> dict:
        return self._s.import_bundle(os.fspath(path))

    def winner_changes(self) -> list[dict]:
        return self._s.winner_changes()

    # Plan states (docs/rollout.md): the plans beside the active ones, a key's history, moves and rollback. A key is
    # (structure, shape_key, fingerprint_key), each in full, as ls() gives them.
    def candidates(self, structure: str = "", shape: str = "", fingerprint: str = "") -> list[dict]:
        return self._s.candidates(structure, shape, fingerprint)

    def history(self, structure: str, shape: str, fingerprint: str = "") -> list[dict]:
        return self._s.history(structure, shape, fingerprint)

    def promote(self, structure: str, shape: str, fingerprint: str, config: str, reason: str = "by hand (python)") -> None:
        self._s.transition(structure, shape, fingerprint, config, "active", reason)

    def reject(self, structure: str, shape: str, fingerprint: str, config: str, reason: str = "by hand (python)") -> None:
        self._s.transition(structure, shape, fingerprint, config, "rejected", reason)

    def rollback(self, structure: str, shape: str, fingerprint: str, reason: str = "by hand (python)") -> str:
        """Restores the key's newest retired plan; returns its configuration. NoPlan when there is none."""
        return self._s.rollback(structure, shape, fingerprint, reason)

    def close(self) -> None:
        self._s.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(location: str | os.PathLike[str] | None = None, read_only: bool = False,  # noqa: A001
         mirror: str | None = None) -> Store:
    """Opens a store (None: the default one, $KILN_STORE or ~/.cache/kiln/plans.db). Corruption for a file that
    is not a store, NewerVersion for a newer schema, NotFound for a read-only open of a missing file."""
    where = _kiln.default_store_path() if location is None else os.fspath(location)
    return Store(_kiln.open_store(where, read_only, mirror))


def default_path() -> str:
    return _kiln.default_store_path()
