"""The verdict cache: SQLite under `$KLINEAGE_CACHE_DIR` (default `~/.cache/klineage`).

Keys are sha256 hashes over everything a verdict depends on (see `cache_key`). The database
runs in WAL mode with a busy timeout, and every operation retries on "database is locked", so
several processes may gate at once. A file that is not a readable database is moved aside and
rebuilt: the cache can lose entries, never fail a gate run.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from gate.verdict import Verdict

T = TypeVar("T")
_RETRIES = 20
SCHEMA = "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict TEXT NOT NULL, created REAL NOT NULL)"


def cache_dir() -> Path:
    return Path(os.environ.get("KLINEAGE_CACHE_DIR") or Path.home() / ".cache" / "klineage")


def cache_key(parts: Iterable[str]) -> str:
    """sha256 over the parts, each length-prefixed so that no two part lists collide."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class VerdictCache:
    """get/put of verdicts by key. Safe under concurrent writers; self-healing when corrupt."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / "verdicts.sqlite"

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(SCHEMA)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def _with_db(self, action: Callable[[sqlite3.Connection], T]) -> T:
        for attempt in range(_RETRIES):
            try:
                conn = self._connect()
                try:
                    return action(conn)
                finally:
                    conn.close()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                self._rebuild()
            except sqlite3.DatabaseError:
                self._rebuild()
        raise sqlite3.OperationalError(f"verdict cache {self.path} stayed locked")

    def _rebuild(self) -> None:
        # Move the bad file aside (not delete: someone may want to look at it) and start over.
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                try:
                    p.replace(Path(str(p) + f".corrupt-{os.getpid()}-{int(time.time())}"))
                except OSError:
                    p.unlink(missing_ok=True)

    def get(self, key: str) -> Verdict | None:
        """The cached verdict (marked `cached=True`), or None."""
        def read(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None

        try:
            text = self._with_db(read)
        except sqlite3.Error:
            return None
        if text is None:
            return None
        try:
            return Verdict.from_json(json.loads(text), cached=True)
        except (ValueError, KeyError, TypeError):
            return None  # written by an older, incompatible gate: recompute

    def put(self, key: str, verdict: Verdict) -> None:
        text = json.dumps(verdict.to_json(), sort_keys=True)

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("INSERT OR REPLACE INTO verdicts (key, verdict, created) VALUES (?, ?, ?)",
                             (key, text, time.time()))

        try:
            self._with_db(write)
        except sqlite3.Error:
            pass  # a cache that cannot be written only costs a recomputation

    def delete(self, key: str) -> None:
        """Drop the entry of `key`, if any."""
        def drop(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("DELETE FROM verdicts WHERE key = ?", (key,))

        try:
            self._with_db(drop)
        except sqlite3.Error:
            pass

    def record(self, key: str, verdict: Verdict, cacheable: bool) -> None:
        """Store the verdict of a run just made: put it when `cacheable`, else drop whatever the
        cache holds for `key`. Candidate code runs as the same user as the gate and can write
        the cache; so a run never leaves an entry for its own key that it did not produce (a
        candidate that writes an accepting verdict for its text and then crashes, a verdict
        that is not cached, gets nothing from it)."""
        if cacheable:
            self.put(key, verdict)
        else:
            self.delete(key)

    def clear(self) -> None:
        def wipe(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("DELETE FROM verdicts")

        self._with_db(wipe)
