"""The bench directory: meta.json (plan and provenance), runs/<id>.json (one per run), logs/ (engine output).

Each run's JSON is written atomically the moment the run ends, so a crash or Ctrl-C loses nothing already
measured, and `report`/`plot` read these files alone. `keep` copies a directory's JSON without its logs, each
run gzipped (`runs/<id>.json.gz`, read like the plain files), for results kept in a repository beside the
tables rendered from them (benchmarks/results/).
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
from pathlib import Path
from typing import Any

SCHEMA = 1


class ResultsError(ValueError):
    """A directory that is not (or not a readable) bench directory."""


class ResultsDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def runs_dir(self) -> Path:
        return self.path / "runs"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def run_path(self, run_id: str) -> Path:
        return self.runs_dir / f"{run_id}.json"

    def exists(self) -> bool:
        return self.meta_path.is_file()

    def write_meta(self, meta: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.meta_path, {"schema": SCHEMA, **meta})

    def start(self, config: dict[str, Any], plan: list[str], provenance: dict[str, Any]) -> dict[str, Any]:
        """A new bench here: meta.json with a fresh nonce, the config, the plan's run ids and the provenance."""
        meta = {"nonce": secrets.token_hex(8), "config": config, "plan": plan, "provenance": provenance}
        self.write_meta(meta)
        return meta

    def read_meta(self) -> dict[str, Any]:
        if not self.exists():
            raise ResultsError(f"{self.path} is not a bench directory (no meta.json); make one with `strata-bench run`")
        return read_json(self.meta_path)

    def write_run(self, run: dict[str, Any]) -> Path:
        path = self.run_path(run["id"])
        write_json(path, run)
        return path

    def has_run(self, run_id: str) -> bool:
        return self.run_path(run_id).is_file()

    def runs(self) -> list[dict[str, Any]]:
        """Every run recorded, in the plan's order (meta's `plan`), unknown ids last."""
        order = {run_id: i for i, run_id in enumerate(self.read_meta().get("plan", []))}
        files = [*self.runs_dir.glob("*.json"), *self.runs_dir.glob("*.json.gz")] if self.runs_dir.is_dir() else []
        runs = [read_json(p) for p in sorted(files)]
        return sorted(runs, key=lambda r: (order.get(r.get("id"), len(order)), r.get("id", "")))


def write_json(path: Path, data: Any) -> None:
    """Write via a temporary file and rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, separators=(",", ":"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def keep(source: ResultsDir, dest: str | Path) -> ResultsDir:
    """Copy `source`'s meta.json and runs (gzipped, byte-stable: no name or time in the gzip header) to `dest`,
    without logs; an existing `dest` is replaced run by run."""
    kept = ResultsDir(dest)
    kept.write_meta({k: v for k, v in source.read_meta().items() if k != "schema"})
    for run in source.runs():
        path = kept.runs_dir / f"{run['id']}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(run, separators=(",", ":"), sort_keys=True).encode()
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        kept.run_path(run["id"]).unlink(missing_ok=True)
    return kept


def read_json(path: Path) -> Any:
    try:
        if path.suffix == ".gz":
            return json.loads(gzip.decompress(path.read_bytes()))
        return json.loads(path.read_text())
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
