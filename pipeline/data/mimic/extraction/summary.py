"""What an extraction (or a stage) set aside, said on the console: ``quarantine_lines`` (the rows quarantined, by
table and reason, and where they are listed; the lines the CSV reader refused) and ``cut_mid_row`` (a plain
CSV file that ends without a newline: cut short, its last row read in part or refused)."""

from __future__ import annotations

from pathlib import Path

QUARANTINE_DIR = "quarantine"  # beside the features: <table>.parquet, each row's id or line and reason
MAX_REASONS = 4  # reasons said per table on the console (the rest counted together)


def cut_mid_row(path: Path | str) -> int | None:
    """The number of the last line of a plain CSV file that does not end with a newline (a file cut short:
    its last row is partial), else None (a compressed file is not checked: a cut one does not decompress)."""
    path = Path(path)
    if path.suffix.lower() != ".csv" or not path.is_file() or path.stat().st_size == 0:
        return None
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        if fh.read(1) == b"\n":
            return None
        fh.seek(0)
        newlines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))
    return newlines + 1


def cut_line(path: Path | str, refused: set[int]) -> str | None:
    """The console's line for a source file cut mid-row (``cut_mid_row``; ``refused``: its lines the reader
    refused), or None."""
    last = cut_mid_row(path)
    if last is None:
        return None
    fate = "was refused (quarantined)" if last in refused else "was read as it is, its last value possibly cut"
    return (f"cut mid-row: {path} ends without a newline: the file looks cut short; its last line ({last:,}) "
            f"{fate}; copy the file again from its source")


def quarantine_lines(manifest: dict, out_dir: Path | str) -> list[str]:
    """The console's account of an extraction's quarantine (``out_dir/quarantine/``): rows by table and reason,
    the lines the CSV reader refused, and each source file cut mid-row, by name."""
    import pyarrow.parquet as pq

    folder = Path(out_dir) / QUARANTINE_DIR
    per_table: dict[str, dict[str, int]] = {}
    refused: dict[str, set[int]] = {}
    for file in sorted(folder.glob("*.parquet")):
        table = pq.read_table(file, columns=["row_id", "line", "reason"]).to_pydict()
        reasons: dict[str, int] = {}
        for line, why in zip(table["line"], table["reason"]):
            key = why.split(":")[0].strip() if line is not None else why  # a reader's refusal: its kind
            reasons[key] = reasons.get(key, 0) + 1
            if line is not None:
                refused.setdefault(file.stem, set()).add(int(line))
        if reasons:
            per_table[file.stem] = reasons
    total = sum(sum(r.values()) for r in per_table.values())
    if not total:
        lines = ["quarantined: no row"]
    else:
        lines = [f"quarantined {total:,} rows of {len(per_table)} table(s); each is listed with its row id or line "
                 f"and reason in {folder}/<table>.parquet:"]
        for name, reasons in sorted(per_table.items()):
            top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            said = "; ".join(f"{why} {n:,}" for why, n in top[:MAX_REASONS])
            if len(top) > MAX_REASONS:
                said += f"; {len(top) - MAX_REASONS} other reasons {sum(n for _, n in top[MAX_REASONS:]):,}"
            lines.append(f"  {name.upper():20s} {sum(reasons.values()):>9,}  {said}")
    if refused:
        lines.append("refused by the CSV reader (malformed lines, quarantined above by line number): "
                     + ", ".join(f"{t.upper()} {len(v):,}" for t, v in sorted(refused.items())))
    locations = ((manifest.get("source") or {}).get("tables") or {}) if manifest.get("source", {}).get(
        "kind") == "csv" else {}
    for name, location in sorted(locations.items()):
        said = cut_line(location, refused.get(name, set()))
        if said:
            lines.append(said)
    return lines


def stage_lines(manifest: dict, source: Path | str) -> list[str]:
    """The console's account of a stage (``stage.json``): each table's rows and refused lines, and each source
    file cut mid-row, by name."""
    lines = []
    for name, t in manifest["tables"].items():
        lines.append(f"  {name:20s} rows={t['rows']:12,d} rejected_lines={len(t['rejects'])}")
    for name, t in manifest["tables"].items():
        said = cut_line(Path(source) / t["source"]["path"], {int(line) for line, _ in t["rejects"]})
        if said:
            lines.append(said)
    return lines

