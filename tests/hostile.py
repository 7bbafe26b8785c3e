"""What a hostile cluster can do to a run it was handed, for the tests (not a test module).

The cluster holds the directory: it can rewrite any row, any file and the manifest, and recompute
every checksum so that the forgery is self-consistent.  These helpers do exactly that: read a run's
ciphertext rows, change them, and write them back as one file with the manifest updated to list
it (sizes, row counts, checksums), as a careful attacker would.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.checksums import ct_checksums, xor_all

#: Where the coefficients of an uncompressed SEAL 4.1 ciphertext start (see hecore.audit.sealbytes).
COEFFICIENTS_AT = 113


def manifest(run: Path) -> dict:
    return json.loads((Path(run) / "_manifest.json").read_text())


def write_manifest(run: Path, doc: dict) -> None:
    (Path(run) / "_manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def read_rows(run: Path, table: str = "ciphertexts") -> pa.Table:
    """Every row of the files the manifest lists for ``table``."""
    doc = manifest(run)
    parts = [pq.read_table(Path(run) / table / e["name"]) for e in doc["files"][table]]
    return pa.concat_tables(parts) if parts else pq.read_table(next((Path(run) / table).glob("*.parquet")))


def with_checksums(t: pa.Table) -> pa.Table:
    """``t`` with every ``ct_xxh3`` recomputed from its ``ct`` (what a forger does)."""
    i = t.schema.get_field_index("ct_xxh3")
    return t.set_column(i, t.schema.field(i), ct_checksums(t.column("ct")))


def write_rows(run: Path, t: pa.Table, table: str = "ciphertexts", name: str = "part-00000-forged.parquet") -> None:
    """Replace ``table``'s files with one file holding ``t`` (checksums recomputed where the table has them),
    listed in the manifest."""
    run = Path(run)
    if "ct_xxh3" not in t.schema.names:
        for p in (run / table).glob("*.parquet"):
            p.unlink()
        pq.write_table(t, run / table / name, compression="none")
        doc = manifest(run)
        doc["files"][table] = [{"name": name, "rows": t.num_rows, "bytes": (run / table / name).stat().st_size}]
        doc["checksums"][table] = {"rows": t.num_rows}
        write_manifest(run, doc)
        return
    t = with_checksums(t)
    for p in (run / table).glob("*.parquet"):
        p.unlink()
    path = run / table / name
    pq.write_table(t, path, compression="none")
    doc = manifest(run)
    xor = xor_all(t.column("ct_xxh3").to_numpy())
    doc["files"][table] = [{"name": name, "rows": t.num_rows, "bytes": path.stat().st_size, "xxh3_xor": xor}]
    doc["checksums"][table] = {"algorithm": "xxh3_64", "rows": t.num_rows, "xxh3_xor": xor}
    write_manifest(run, doc)


def places_apart(rng, trials: int):
    """For binding trials: ``(key, here, other key, there)`` each trial -- a fresh owner key, a tile place, and the
    place a lying cluster's ciphertext comes from: another image's, the next tile to the right or below, or the
    same place of another run (another key), in turn."""
    from hecore import binding

    for trial in range(trials):
        key = binding.new_key()
        here = ("a", 0, int(rng.integers(0, 9)), int(rng.integers(0, 9)))
        there = [("b", 0, here[2], here[3]), ("a", 0, here[2], here[3] + 1), ("a", 0, here[2] + 1, here[3]),
                 here][trial % 4]
        yield key, here, binding.new_key() if there == here else key, there


def offset_raw(key: bytes, place: tuple, ops, pixels: np.ndarray, unit: float, *, halo: int = 0) -> np.ndarray:
    """For binding trials: the raw results a ciphertext of ``place`` ``(image id, channel, tile row, tile column)``
    decrypts to after ``ops`` (parsed), computed in the clear from ``pixels`` (a block, ``height x width x
    channels``) carrying that place's keyed offsets of size ``unit``, the ``halo`` cut off, with CKKS-sized
    noise."""
    from hecore import binding
    from hecore.ops.spec import finish_for, reference

    shaken = pixels + np.stack([binding.offset_values(key, place[0], c, place[2], place[3], pixels.shape[:2], unit)
                                for c in range(pixels.shape[2])], axis=-1)
    out = reference(shaken, ops)
    out = out if out.ndim == 3 else out[:, :, None]
    raw = out[halo:out.shape[0] - halo, halo:out.shape[1] - halo, place[1] if out.shape[2] > 1 else 0]
    return raw / float(finish_for(ops).post_scale) + np.random.default_rng(0).normal(0, 1e-3, raw.shape)


def swap_flat_tiles(source: Path, run: Path, *, channels: int = 3, first=(1, 1, 1), second=(1, 0, 1)) -> str:
    """A copy ``run`` of the processed run ``source`` with two tiles of its image of ``channels`` channels swapped
    (``(channel, tile row, tile column)``, by default channel 1, tiles (1, 1) and (0, 1) of a colour image: on a
    flat image, the same values), the manifest relisted; the image's id."""
    import shutil

    shutil.copytree(source, run)
    t = read_rows(run)
    rows = t.to_pylist()
    flat = next(r["image_id"] for r in rows if r["image_channels"] == channels)
    where = {(r["channel"], r["tile_y"], r["tile_x"]): n for n, r in enumerate(rows) if r["image_id"] == flat}
    cts = t.column("ct").to_pylist()
    a, b = where[tuple(first)], where[tuple(second)]
    cts[a], cts[b] = cts[b], cts[a]
    write_rows(run, t.set_column(t.schema.get_field_index("ct"), "ct", pa.array(cts, type=t.schema.field("ct").type)))
    return flat


def split_by_image(run: Path) -> dict[str, str]:
    """Rewrite the run's ciphertext table as one file per image (listed in the manifest); image id -> file."""
    doc = json.loads((run / "_manifest.json").read_text())
    t = pa.concat_tables([pq.read_table(run / "ciphertexts" / e["name"]) for e in doc["files"]["ciphertexts"]])
    for p in (run / "ciphertexts").glob("*.parquet"):
        p.unlink()
    entries, where = [], {}
    for n, iid in enumerate(sorted(set(t.column("image_id").to_pylist()))):
        part = t.filter(pc.equal(t.column("image_id"), iid))
        name = f"part-{n:05d}-img.parquet"
        pq.write_table(part, run / "ciphertexts" / name, compression="none")
        entries.append({"name": name, "rows": part.num_rows, "bytes": (run / "ciphertexts" / name).stat().st_size,
                        "xxh3_xor": xor_all(part.column("ct_xxh3").to_numpy())})
        where[iid] = name
    doc["files"]["ciphertexts"] = entries
    (run / "_manifest.json").write_text(json.dumps(doc, indent=2))
    return where


def set_where(t: pa.Table, mask, column: str, value) -> pa.Table:
    """``t`` with ``column`` set to ``value`` (a scalar, or a function of the old value) where ``mask``."""
    i = t.schema.get_field_index(column)
    old = t.column(column).to_pylist()
    new = [(value(v) if callable(value) else value) if m else v for v, m in zip(old, mask)]
    return t.set_column(i, t.schema.field(i), pa.array(new, type=t.schema.field(i).type))


def image_mask(t: pa.Table, image_id: str) -> list[bool]:
    return [v == image_id for v in t.column("image_id").to_pylist()]


def first_row_mask(t: pa.Table, image_id: str) -> list[bool]:
    ids = t.column("image_id").to_pylist()
    first = ids.index(image_id)
    return [i == first for i in range(len(ids))]


def image_ids(t: pa.Table) -> list[str]:
    return sorted(set(t.column("image_id").to_pylist()))


# --- ciphertext bytes SEAL refuses ---------------------------------------------------------------

def truncated(ct: bytes) -> bytes:
    return ct[: len(ct) // 2]


def coefficient_above_q(ct: bytes) -> bytes:
    """The first coefficient set to 2^64 - 1, above every prime: SEAL's validation refuses it."""
    b = bytearray(ct)
    b[COEFFICIENTS_AT:COEFFICIENTS_AT + 8] = struct.pack("<Q", 2**64 - 1)
    return bytes(b)


def random_bytes(ct: bytes, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, len(ct), dtype=np.uint8).tobytes()


def tree(root: Path) -> set[str]:
    """Every file under ``root`` (relative paths), to see what a job wrote where."""
    root = Path(root)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# --- Parquet footers that lie ----------------------------------------------------------------------
# A Parquet footer is a Thrift struct in the compact protocol.  These helpers decode it into nested
# lists of [field id, type, value] and encode it back, so that a test can change one number (a column
# chunk's size, a row count) and write the file with the new footer, as a cluster could.

_I64, _I32, _I16, _BYTE, _BIN, _LIST, _SET, _MAP, _STRUCT, _DOUBLE = 6, 5, 4, 3, 8, 9, 10, 11, 12, 7


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, pos


def _unzig(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _value(data: bytes, pos: int, t: int):
    if t in (1, 2):
        return t == 1, pos
    if t == _BYTE:
        return data[pos], pos + 1
    if t in (_I16, _I32, _I64):
        n, pos = _varint(data, pos)
        return _unzig(n), pos
    if t == _DOUBLE:
        return data[pos:pos + 8], pos + 8
    if t == _BIN:
        n, pos = _varint(data, pos)
        return data[pos:pos + n], pos + n
    if t in (_LIST, _SET):
        head = data[pos]
        pos += 1
        size, et = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        items = []
        for _ in range(size):
            if et in (1, 2):
                items.append(data[pos] == 1)
                pos += 1
            else:
                v, pos = _value(data, pos, et)
                items.append(v)
        return (et, items), pos
    if t == _STRUCT:
        return _struct(data, pos)
    raise ValueError(f"thrift type {t}")


def _struct(data: bytes, pos: int):
    fields, last = [], 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, t = head >> 4, head & 0x0F
        if delta:
            fid = last + delta
        else:
            n, pos = _varint(data, pos)
            fid = _unzig(n)
        v, pos = _value(data, pos, t)
        fields.append([fid, t, v])
        last = fid


def _put_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _zig(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _encode_value(t: int, v) -> bytes:
    if t in (1, 2):
        return b""
    if t == _BYTE:
        return bytes([v])
    if t in (_I16, _I32, _I64):
        return _put_varint(_zig(v))
    if t == _DOUBLE:
        return v
    if t == _BIN:
        return _put_varint(len(v)) + v
    if t in (_LIST, _SET):
        et, items = v
        head = bytes([(len(items) << 4) | et]) if len(items) < 15 else bytes([0xF0 | et]) + _put_varint(len(items))
        return head + b"".join(bytes([1 if x else 2]) if et in (1, 2) else _encode_value(et, x) for x in items)
    if t == _STRUCT:
        return _encode_struct(v)
    raise ValueError(f"thrift type {t}")


def _encode_struct(fields) -> bytes:
    out, last = bytearray(), 0
    for fid, t, v in fields:
        if t in (1, 2):
            t = 1 if v else 2
        if 0 < fid - last <= 15:
            out.append(((fid - last) << 4) | t)
        else:
            out.append(t)
            out += _put_varint(_zig(fid))
        out += _encode_value(t, v)
        last = fid
    return bytes(out) + b"\x00"


def read_footer(path: Path):
    """The footer of the Parquet file ``path`` as [field id, type, value] lists (parquet.thrift's FileMetaData)."""
    data = Path(path).read_bytes()
    n = struct.unpack("<I", data[-8:-4])[0]
    fields, _ = _struct(data[-8 - n:-8], 0)
    return fields


def write_footer(path: Path, fields) -> None:
    """Rewrite ``path`` with the footer ``fields`` (its data pages untouched)."""
    data = Path(path).read_bytes()
    n = struct.unpack("<I", data[-8:-4])[0]
    footer = _encode_struct(fields)
    Path(path).write_bytes(data[:-8 - n] + footer + struct.pack("<I", len(footer)) + b"PAR1")


def field(fields, fid: int):
    """The [field id, type, value] entry ``fid`` of a decoded struct."""
    return next(f for f in fields if f[0] == fid)


def column_chunks(footer):
    """Every ColumnMetaData struct of a decoded FileMetaData (row groups: field 4; their columns: field 1;
    a chunk's meta_data: field 3)."""
    for rg in field(footer, 4)[2][1]:
        for chunk in field(rg, 1)[2][1]:
            yield field(chunk, 3)[2]


#: ColumnMetaData's fields: 6 total_uncompressed_size, 7 total_compressed_size, 9 data_page_offset,
#: 11 dictionary_page_offset; FileMetaData's 3 and RowGroup's 3: num_rows.
UNCOMPRESSED_SIZE, COMPRESSED_SIZE, DATA_PAGE_OFFSET, NUM_ROWS = 6, 7, 9, 3


def lie_in_footer(path: Path, *, chunk_size: int | None = None, rows: int | None = None,
                  data_offset: int | None = None) -> None:
    """Change numbers in ``path``'s footer: every column chunk's stored size (``chunk_size``, compressed and
    uncompressed), its data page offset, or the row count (the file's and every row group's)."""
    footer = read_footer(path)
    for meta in column_chunks(footer):
        if chunk_size is not None:
            field(meta, UNCOMPRESSED_SIZE)[2] = chunk_size
            field(meta, COMPRESSED_SIZE)[2] = chunk_size
        if data_offset is not None:
            field(meta, DATA_PAGE_OFFSET)[2] = data_offset
    if rows is not None:
        field(footer, NUM_ROWS)[2] = rows
        for rg in field(footer, 4)[2][1]:
            field(rg, NUM_ROWS)[2] = rows
    write_footer(path, footer)
